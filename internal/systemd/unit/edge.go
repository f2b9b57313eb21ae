package unit

// Edge is one step of the chain that makes a unit start at boot:
// From pulls in To by Kind ("Wants", "Requires", ".wants", "socket",
// "timer", "path", "alias", …), declared at Source (the unit file or
// .wants/.requires link that says so). Findings carry chains of them, so
// the type sits here, in the model every later stage may import.
type Edge struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Kind   string `json:"kind"`
	Source string `json:"source,omitempty"`
	// Assumes is what the model assumed of the machine for this edge
	// (a generator's output that depends on it), "" for nothing.
	Assumes string `json:"assumes,omitempty"`
}
