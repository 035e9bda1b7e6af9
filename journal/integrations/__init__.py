"""Optional integrations with agent frameworks.

Each submodule imports its framework lazily at import time of that submodule
only, so `import journal` never needs LangGraph or the OpenAI Agents SDK:

- `journal.integrations.langgraph`: a LangGraph checkpoint saver
  (install `journal[langgraph]`).
- `journal.integrations.openai_agents`: an OpenAI Agents SDK session
  (install `journal[openai-agents]`).
"""
