"""Optional integrations with agent frameworks.

Each submodule imports its framework at import time of that submodule only, so
`import journal` never needs one:

- `journal.integrations.langgraph`: a LangGraph checkpoint saver, and
  `generate_checkpointer` for LangGraph Server (install `journal[langgraph]`;
  `journal[langgraph-server]` to run `langgraph dev`).
- `journal.integrations.openai_agents`: an OpenAI Agents SDK session
  (install `journal[openai-agents]`).
- `journal.integrations.pydantic_ai`: a pydantic-ai `ConversationStore`
  (install `journal[pydantic-ai]`).
- `journal.integrations.adk`: a Google ADK session service (install `journal[adk]`).
- `journal.integrations.claude_agent_sdk`: a Claude Agent SDK `SessionStore`
  (install `journal[claude-agent-sdk]`).

`dirlock` is shared by them and imports no framework.
"""
