package pollgroup

const (
	HandoverWindow = handoverWindow
	WritesPerPass  = writesPerPass
)
