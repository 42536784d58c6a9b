"""TEST-ONLY code shipped in the package, never used by a session: `faults` (named fault-injection
points that kill the process when KOPT_FAULT names them; a no-op otherwise) and `toy` (a toy kernel
repository with exactly controlled metrics, and fakes of the clock and the runner).

This face imports nothing: the referee imports `kopt_mcp.testing.faults`, and `toy` imports the
referee's services."""
