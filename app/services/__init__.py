"""Services: "transaction, then push to a runner or publish to viewers"; routes publish page events too (events.after_commit).

The rule they keep (app/live.py AttemptGate): a log chunk may reach viewers before the transaction
that stores it commits only when its trial's current attempt was validated for that runner by an
earlier committed transaction, and no transaction that can make attempts stale (the lost-runner
sweep, a runner's hello) is pending. Routes (app/web, app/api) and sockets call these functions;
nothing else touches `hub.attempts`.
"""
