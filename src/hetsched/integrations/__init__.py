"""Framework adapters: translate a user's application graph into a hetsched workflow and apply the
session's mapping to its nodes. They hold no scheduling logic: the session's policy decides, the
session's executor places and runs (docs/architecture.md).

- :mod:`hetsched.integrations.langgraph`: LangGraph compiled graphs (optional extra ``[langgraph]``).
"""
