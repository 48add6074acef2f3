package console

import (
	"net/http"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// natsView is the JetStream topology: streams, their consumers, and the
// cluster's nodes with the groups each leads.
type natsView struct {
	Server    string       `json:"server"`
	Cluster   string       `json:"cluster,omitempty"`
	Streams   []streamView `json:"streams"`
	Nodes     []nodeView   `json:"nodes"`
	Collected time.Time    `json:"collected"`
}

type streamView struct {
	Name      string         `json:"name"`
	Subjects  []string       `json:"subjects"`
	Retention string         `json:"retention"`
	Messages  uint64         `json:"messages"`
	Bytes     uint64         `json:"bytes"`
	Replicas  int            `json:"replicas"`
	Leader    string         `json:"leader,omitempty"`
	Consumers []consumerView `json:"consumers"`
}

type consumerView struct {
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
	Leader      string `json:"leader,omitempty"`
}

type nodeView struct {
	Name string `json:"name"`
	// Leads counts the streams and consumers whose leader it is.
	Leads   int  `json:"leads"`
	Current bool `json:"current"`
}

func (c *Console) natsView(r *http.Request) (any, error) {
	ctx := r.Context()
	nc := c.js.Conn()
	v := natsView{Server: nc.ConnectedServerName(), Cluster: nc.ConnectedClusterName(), Streams: []streamView{}, Nodes: []nodeView{}, Collected: time.Now()}
	nodes := map[string]*nodeView{}
	node := func(name string, current bool) *nodeView {
		if name == "" {
			return nil
		}
		n, ok := nodes[name]
		if !ok {
			n = &nodeView{Name: name, Current: current}
			nodes[name] = n
		}
		return n
	}
	leads := func(ci *jetstream.ClusterInfo) string {
		if ci == nil {
			return ""
		}
		if n := node(ci.Leader, true); n != nil {
			n.Leads++
		}
		for _, p := range ci.Replicas {
			node(p.Name, p.Current)
		}
		return ci.Leader
	}
	lister := c.js.ListStreams(ctx)
	for info := range lister.Info() {
		s := streamView{Name: info.Config.Name, Subjects: info.Config.Subjects, Retention: info.Config.Retention.String(),
			Messages: info.State.Msgs, Bytes: info.State.Bytes, Replicas: info.Config.Replicas, Leader: leads(info.Cluster), Consumers: []consumerView{}}
		st, err := c.js.Stream(ctx, info.Config.Name)
		if err == nil {
			cl := st.ListConsumers(ctx)
			for ci := range cl.Info() {
				s.Consumers = append(s.Consumers, consumerView{Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
					Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting, Leader: leads(ci.Cluster)})
			}
			if err := cl.Err(); err != nil {
				return nil, err
			}
		}
		v.Streams = append(v.Streams, s)
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	sort.Slice(v.Streams, func(i, j int) bool { return v.Streams[i].Name < v.Streams[j].Name })
	for _, n := range nodes {
		v.Nodes = append(v.Nodes, *n)
	}
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Name < v.Nodes[j].Name })
	return v, nil
}
