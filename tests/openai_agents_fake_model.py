"""A scripted `agents.models.interface.Model` for tests: canned outputs, no network.

Modelled on the SDK's own tests/fake_model.py: each call pops the next scripted
output (a list of output items, or an exception to raise) and records the
arguments it was called with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents.items import ModelResponse, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def text_message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
        status="completed",
    )


def function_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id="fc-" + call_id, call_id=call_id, type="function_call", name=name, arguments=arguments
    )


class ScriptedModel(Model):
    def __init__(self) -> None:
        self.outputs: list[list[TResponseOutputItem] | Exception] = []
        self.calls: list[dict[str, Any]] = []

    def script(self, *outputs: list[TResponseOutputItem] | Exception) -> None:
        self.outputs.extend(outputs)

    @property
    def last_input(self) -> Any:
        return self.calls[-1]["input"]

    def _next(self, system_instructions: str | None, input: Any) -> list[TResponseOutputItem]:
        self.calls.append({"system_instructions": system_instructions, "input": input})
        if not self.outputs:
            raise AssertionError("the scripted model ran out of outputs")
        out = self.outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        output = self._next(system_instructions, input)
        return ModelResponse(output=output, usage=Usage(), response_id="resp-1")

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        output = self._next(system_instructions, input)
        response = Response(
            id="resp-1",
            created_at=123,
            model="scripted",
            object="response",
            output=output,
            tool_choice="none",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
        )
        yield ResponseCreatedEvent(type="response.created", response=response, sequence_number=0)
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=1
        )
