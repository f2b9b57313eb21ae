package audit

// CompilationStarted reports whether a's policies are being compiled or
// are compiled.
func CompilationStarted(a *Auditor) bool { return a.compile.started.Load() }
