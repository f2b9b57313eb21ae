package userfile

// SetLimit lowers the bound for a test and returns a function restoring it.
func SetLimit(n int64) func() {
	old := limit
	limit = n
	return func() { limit = old }
}
