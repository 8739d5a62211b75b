"""OpenAI-compatible HTTP serving of the engine: API, SSE, tool calls, metrics, runtime switch.

    >>> from specpilot.serve import ServerConfig, create_app                  # doctest: +SKIP
    >>> app = create_app(ServerConfig(model_name="smollm2"), engine=engine)    # doctest: +SKIP

Needs the ``server`` extra (fastapi, uvicorn, prometheus-client).
"""

from specpilot.serve.app import ServerConfig, create_app, spec_metrics
from specpilot.serve.strategy import StrategySwitch, StrategyTable
from specpilot.serve.toolcalls import ParsedOutput, ToolCall, ToolCallStream, parse_tool_calls

__all__ = [
    "ParsedOutput",
    "ServerConfig",
    "StrategySwitch",
    "StrategyTable",
    "ToolCall",
    "ToolCallStream",
    "create_app",
    "parse_tool_calls",
    "spec_metrics",
]
