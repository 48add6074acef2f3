package pollgroup_test

import (
	"fmt"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
)

func workspaceIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	return ids
}

func assignAll(ws, members []string) map[string]string {
	out := map[string]string{}
	for _, w := range ws {
		out[w] = pollgroup.Owner(w, members)
	}
	return out
}

// Every member computes the assignment alone: it must not depend on the
// order it lists the members in, must spread the fleet, and a join or a
// leave must move only the workspaces the newcomer wins or the leaver held.
func TestAssignmentMovesOnlyTheChangingMembersShare(t *testing.T) {
	ws := workspaceIDs(300)
	three := assignAll(ws, []string{"a1", "b2", "c3"})
	if got := assignAll(ws, []string{"c3", "a1", "b2"}); fmt.Sprint(got) != fmt.Sprint(three) {
		t.Fatal("the assignment depends on the order of the members")
	}
	count := map[string]int{}
	for _, m := range three {
		count[m]++
	}
	for _, m := range []string{"a1", "b2", "c3"} {
		if count[m] < 60 || count[m] > 140 { // 100 expected; binomial sd 8
			t.Errorf("member %s got %d of 300 workspaces", m, count[m])
		}
	}

	four := assignAll(ws, []string{"a1", "b2", "c3", "d4"})
	moved := 0
	for _, w := range ws {
		if four[w] != three[w] {
			moved++
			if four[w] != "d4" {
				t.Errorf("workspace %s moved from %s to %s on d4's join", w, three[w], four[w])
			}
		}
	}
	if moved < 40 || moved > 110 { // 75 expected
		t.Errorf("d4's join moved %d of 300 workspaces", moved)
	}

	two := assignAll(ws, []string{"a1", "b2"})
	for _, w := range ws {
		if three[w] != "c3" && two[w] != three[w] {
			t.Errorf("workspace %s moved from %s to %s on c3's leave", w, three[w], two[w])
		}
	}
	if pollgroup.Owner(ws[0], nil) != "" {
		t.Error("an owner among no members")
	}
}
