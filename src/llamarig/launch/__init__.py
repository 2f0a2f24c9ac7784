"""Starting and stopping llama-server: launch (detached, with a state file and verification against
the plan), stop (exactly the process launch started), and the compare of planned vs logged buffers."""
