# SPDX-License-Identifier: Apache-2.0
"""The embedded text the tiny tokenizers learn their BPE merges from.

Concept: a few kilobytes of chat-like English, tool-call JSON and the fixed wording of the
families' system prompts, so that prompts of the tiny models encode to a sensible number of
tokens. It is data, never read at run time from disk or network.

Invariant: changing this text changes every tiny tokenizer (and so every weight file hash);
bump ``BUILD_VERSION`` in ``_build.py`` when you edit it.
"""

from __future__ import annotations

CORPUS = r"""
Hello! How can I help you today? Hi there, nice to meet you. Good morning, good evening.
I am a small assistant running on your own computer. I can answer questions, tell a joke,
do some arithmetic with a calculator tool, and tell you the current time.
What is mp13? mp13 is a library for running local language models with adapters, tools and
branching conversations. You can fork a conversation, retry a reply, and replay a session.
Tell me a joke. Why did the developer go broke? Because he used up all his cache.
What can you do? I can chat, call tools, and remember the conversation you are in.
Thank you! You are welcome. Goodbye, see you later. Have a nice day.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a
single step. The weather today is sunny with a light breeze and a high of twenty degrees.
What is the weather like in Paris? Let me check the weather for you. It is raining in London.
The answer is 391. The result of the calculation is 42. The current time is 12:30.
Please summarize the following text in one sentence. Translate this into French.
Write a short poem about the sea. The sea is wide, the sea is deep, the waves are calm.
Sure, here is a list: first, second, third. In summary, the model is small but fast.

You are a helpful assistant. You are a function calling AI model. You are provided with
function signatures within <tools></tools> XML tags. You may call one or more functions to
assist with the user query. Don't make assumptions about what values to plug into functions.
Here are the available tools: Use the following pydantic model json schema for each tool call
you will make. For each function call return a json object with function name and arguments
within <tool_call></tool_call> XML tags as follows:
# Tools

You may call one or more functions to assist with the user query.
For each function call, return a json object with function name and arguments.
Environment: ipython
Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024
Given the following functions, please respond with a JSON for a function call with its proper
arguments that best answers the given prompt.
Respond in the format {"name": function name, "parameters": dictionary of argument name
and its value}.
Do not use variables.
Knowledge Cutoff Date: April 2024. Today's Date: January 01, 2025.
You are Granite, developed by IBM.
You are a helpful assistant with access to the following tools. When a tool is required to
answer the user's query, respond only with followed by a JSON list of tools used. If a tool
does not exist in the provided list of tools, notify the user that you do not have the ability
to fulfill the request. You are a helpful AI assistant.

{"type": "function", "function": {"name": "get_weather", "description": "Get the current
weather in a given location", "parameters": {"type": "object", "properties": {"location":
{"type": "string", "description": "The city and state, e.g. San Francisco, CA"}, "unit":
{"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}}
{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic
expression", "parameters": {"type": "object", "properties": {"expression": {"type": "string",
"description": "The expression to evaluate, e.g. 17*23"}}, "required": ["expression"]}}}
{"type": "function", "function": {"name": "current_time", "description": "Return the current
time", "parameters": {"type": "object", "properties": {}, "required": []}}}
{"name": "calculator", "arguments": {"expression": "17*23"}}
{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
{"name": "current_time", "arguments": {}}
{"name": "get_weather", "parameters": {"location": "London"}}
[{"name": "calculator", "arguments": {"expression": "2+2"}, "id": "abc123def"}]
{"content": "391", "call_id": "abc123def"}
{"temperature": 21, "unit": "celsius", "condition": "sunny"}
{"time": "2025-01-01T12:30:00"}
Args:
    location(str): The city and state
    expression(str): The expression to evaluate
Returns:
    dict: The result

def add(a: int, b: int) -> int:
    return a + b

for i in range(10):
    print(i * i)

import json
data = json.loads(text)
if data is None:
    raise ValueError("no data")
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 17 23 42 100 391 1000 2024 2025 3.14 0.5
Evaluate an arithmetic expression exactly and safely. Supports numbers, + - * / // % ** (or ^;
bounded exponents), parentheses, the constants pi, e, tau and the functions abs, round, min, max,
sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, factorial.
The expression, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 3".
The current date and time as ISO 8601 text. An IANA time zone such as "Europe/Paris" or "UTC";
the machine's local time zone when omitted. List the tools you can call, or explain one tool
and its arguments. The tool to explain; omit it to list all tools you can call.
{"type": "object", "properties": {"expression": {"type": "string", "description": "The
expression"}}, "required": ["expression"], "additionalProperties": false}
{"timezone": {"type": ["string", "null"], "description": "A time zone", "default": null}}
{"name": {"type": ["string", "null"], "description": "The tool name", "default": null}}
"type": "string", "type": "integer", "type": "number", "type": "boolean", "type": "array",
"items": {"type": "string"}, "enum": ["a", "b"], "default": null, "title": "Name"
str, int, float, bool, list[str], dict[str, Any], Union[str,None], Optional[int], None, Any

The user asked a question and the assistant answered it. The assistant called a tool, the tool
returned a result, and the assistant used the result to answer the question. When you do not
know the answer, say that you do not know. Keep your answers short, clear and friendly.
Here is the answer to your question. Let me think about it step by step. First, we read the
question. Then we find the numbers. Finally, we compute the result and check it again.
Could you please tell me more about what you need? I would be happy to help you with that.
The conversation can be saved, searched and replayed later against another model or adapter.
An adapter is a small set of weights trained on top of a base model. Training takes a few
minutes on a laptop. The engine serves many requests at the same time, in waves, and each
request can use a different adapter. Streaming shows the reply while it is being generated.
Press Ctrl+C to cancel a reply, Ctrl+D to quit, and type /help to see the commands.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. January, February, March,
April, May, June, July, August, September, October, November, December. morning, afternoon,
evening, night, today, tomorrow, yesterday, minutes, hours, seconds, days, weeks, years.
one two three four five six seven eight nine ten hundred thousand million plus minus times
divided by equals percent square root answer result number value sum product difference
"""
