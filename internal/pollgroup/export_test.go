package pollgroup

const HandoverWindow = handoverWindow
