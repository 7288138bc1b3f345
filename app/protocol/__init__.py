"""What the server and the runner share, in one place both import: the vocabulary of their exchange.

messages (the websocket's messages, pydantic), metrics (the metric and phase lines recipes print, metric names,
condition tags), preflight (the preflight failure line), sglang_output (SGLang's output formats), recipes (the
recipe contract's error and time limit), logconfig (log levels and handlers), trace (the log pipeline's timing).
Nothing here imports web or database code. Only `messages` needs pydantic: every other module is standard
library only, because recipes import them under a GPU node's own python (runners_path links `app` for them),
so this file imports nothing.
"""
