"""The answer over (batch, draft tokens): one home (issue 33); configs/ writes each engine's launch settings."""
