"""The official `openai` Python client against a running `lamina serve`.

Run by `cargo xtask test` (see xtask/src/serve.rs), which installs the
package into a venv under the target directory, starts the server with an
embedding and a chat model and an API key, and sets:

  LAMINA_URL        http://127.0.0.1:PORT/v1
  LAMINA_API_KEY    the server's key
  LAMINA_EMBED      the embedding model's name
  LAMINA_CHAT       the chat model's name
"""

import base64
import json
import math
import os
import struct
import sys

import openai
from openai import OpenAI
from typing import Annotated

from pydantic import BaseModel, Field

URL = os.environ["LAMINA_URL"]
KEY = os.environ["LAMINA_API_KEY"]
EMBED = os.environ["LAMINA_EMBED"]
CHAT = os.environ["LAMINA_CHAT"]

client = OpenAI(base_url=URL, api_key=KEY, max_retries=0, timeout=300)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def norm(v):
    return math.sqrt(sum(x * x for x in v))


# Models.
ids = [m.id for m in client.models.list()]
check(EMBED in ids and CHAT in ids, f"models.list gives both models: {ids}")

# Embeddings: the client asks for base64 by default and decodes it.
texts = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of France."]
r = client.embeddings.create(model=EMBED, input=texts)
check(len(r.data) == 2, "two embeddings")
check([d.index for d in r.data] == [0, 1], "indices in order")
v0 = r.data[0].embedding
check(len(v0) == 768, f"768 dimensions, got {len(v0)}")
check(abs(norm(v0) - 1.0) < 1e-4, "unit length")
check(r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens, "usage")

f = client.embeddings.create(model=EMBED, input=texts[0], encoding_format="float")
check(max(abs(a - b) for a, b in zip(f.data[0].embedding, v0)) < 1e-6, "float equals base64")

raw = client.embeddings.with_raw_response.create(model=EMBED, input=texts[0], encoding_format="base64")
b64 = raw.http_response.json()["data"][0]["embedding"]
decoded = struct.unpack(f"<{len(base64.b64decode(b64)) // 4}f", base64.b64decode(b64))
check(max(abs(a - b) for a, b in zip(decoded, v0)) < 1e-6, "base64 is little-endian f32")

m = client.embeddings.create(model=EMBED, input=texts[0], dimensions=256)
check(len(m.data[0].embedding) == 256, "dimensions=256")
check(abs(norm(m.data[0].embedding) - 1.0) < 1e-4, "Matryoshka vectors are re-normalised")

# Chat, not streamed.
messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
c = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=16, temperature=0)
check(c.object == "chat.completion", "chat object")
text = c.choices[0].message.content
check(isinstance(text, str) and len(text) > 0, f"chat text: {text!r}")
check(c.choices[0].message.role == "assistant", "assistant role")
check(c.choices[0].finish_reason in ("stop", "length"), "finish_reason")
check(c.usage.completion_tokens >= 1 and c.usage.prompt_tokens > 0, "chat usage")

# Chat, streamed: the same greedy text.
stream = client.chat.completions.create(
    model=CHAT, messages=messages, max_tokens=16, temperature=0, stream=True,
    stream_options={"include_usage": True},
)
pieces, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
check("".join(pieces) == text, f"streamed text {''.join(pieces)!r} == {text!r}")
check(finish == c.choices[0].finish_reason, "streamed finish_reason")
check(usage is not None and usage.completion_tokens == c.usage.completion_tokens, "streamed usage")

# Completions.
t = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=8, temperature=0)
check(t.object == "text_completion" and isinstance(t.choices[0].text, str), "completion")

# Log-probabilities, through the client's types.
c = client.chat.completions.create(
    model=CHAT, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3,
)
content = c.choices[0].logprobs.content
check(len(content) == c.usage.completion_tokens, "a logprob entry per sampled token")
for e in content:
    check(isinstance(e.token, str) and isinstance(e.bytes, list) and e.logprob <= 0, f"entry {e}")
    check(len(e.top_logprobs) == 3, "three alternatives")
    lps = [t.logprob for t in e.top_logprobs]
    check(lps == sorted(lps, reverse=True), "alternatives most likely first")
    check(e.logprob == lps[0] and e.token == e.top_logprobs[0].token, "greedy picks the most likely")
stream = client.chat.completions.create(
    model=CHAT, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3,
    stream=True,
)
streamed = [e for chunk in stream for ch in chunk.choices if ch.logprobs for e in ch.logprobs.content]
check([(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content],
      "streamed logprobs equal the whole ones")
t = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=5, temperature=0, logprobs=2)
lp = t.choices[0].logprobs
check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
      == t.usage.completion_tokens, "completions logprobs: one entry per token")
check(all(1 <= len(d) <= 3 for d in lp.top_logprobs), "completions top_logprobs maps")
check(lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), "text offsets")

# n choices.
c = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=6, temperature=0.8, seed=3, n=3)
check([ch.index for ch in c.choices] == [0, 1, 2], f"three choices: {c.choices}")
check(all(isinstance(ch.message.content, str) for ch in c.choices), "each choice has text")
stream = client.chat.completions.create(model=CHAT, messages=messages, max_tokens=6, temperature=0, n=3, stream=True)
texts = {0: "", 1: "", 2: ""}
for chunk in stream:
    for ch in chunk.choices:
        texts[ch.index] += ch.delta.content or ""
check(len(set(texts.values())) == 1 and texts[0], f"greedy streamed choices agree: {texts}")
t = client.completions.create(model=CHAT, prompt="Once upon a time", max_tokens=4, n=3, temperature=0)
check(len(t.choices) == 3 and len({ch.text for ch in t.choices}) == 1, "three greedy completions")

# Structured output: pydantic models through the client's parse helper, at
# temperature 0.8, on 20 prompts; every reply parses into the model. Strings
# and lists are bounded: unbounded, this 135M model at 0.8 sometimes repeats
# an item until the token limit (the reply stays valid but never ends).
class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population: int = Field(ge=0)


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=150)
    hobbies: list[Annotated[str, Field(max_length=30)]] = Field(max_length=4)


parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
places = ["a big city", "a small town", "a capital", "a port", "a city in Asia", "a city in Africa",
          "a city in Europe", "a city in America", "a mountain town", "a desert city"]
for i, place in enumerate(places * 2):
    shape = City if i % 2 == 0 else Person
    what = place if shape is City else f"a person who lives in {place}"
    r = parse(model=CHAT, messages=[{"role": "user", "content": f"Describe {what} as JSON."}],
              response_format=shape, temperature=0.8, seed=i)
    check(isinstance(r.choices[0].message.parsed, shape), f"parsed {shape.__name__}: {r.choices[0].message}")
c = client.chat.completions.create(
    model=CHAT, messages=[{"role": "user", "content": "Give me a colour as JSON."}],
    response_format={"type": "json_object"}, temperature=0,
)
check(isinstance(json.loads(c.choices[0].message.content), dict), "json_object gives an object")
try:
    client.chat.completions.create(model=CHAT, messages=messages, response_format={"type": "xml"})
    check(False, "an unknown response_format is refused")
except openai.BadRequestError as e:
    check(e.body.get("param") == "response_format", f"400 names response_format: {e.body}")

# Tool calls, through the client's types: pydantic tools are strict, so
# `parse` fills `parsed_arguments`.
class GetWeather(BaseModel):
    city: str = Field(max_length=40)
    unit: str = Field(pattern="^(celsius|fahrenheit)$")


class GetTime(BaseModel):
    tz: str = Field(max_length=40)


tools = [openai.pydantic_function_tool(GetWeather, name="get_weather", description="Current weather in a city."),
         openai.pydantic_function_tool(GetTime, name="get_time", description="Local time in a time zone.")]
weather_q = [{"role": "user", "content": "Use the get_weather tool to get the weather in Paris."}]
r = parse(model=CHAT, messages=weather_q, tools=tools, tool_choice="required", temperature=0.8, seed=1)
call = r.choices[0].message.tool_calls[0]
check(r.choices[0].finish_reason == "tool_calls", f"a forced call finishes with tool_calls: {r.choices[0]}")
check(isinstance(call.function.parsed_arguments, (GetWeather, GetTime)), f"forced call parses: {call}")
r = parse(model=CHAT, messages=weather_q, tools=tools, temperature=0,
          tool_choice={"type": "function", "function": {"name": "get_time"}})
call = r.choices[0].message.tool_calls[0]
check(call.function.name == "get_time" and isinstance(call.function.parsed_arguments, GetTime), f"named call: {call}")
r = parse(model=CHAT, messages=weather_q, tools=tools, tool_choice="auto", temperature=0)
msg = r.choices[0].message
check(msg.tool_calls and isinstance(msg.tool_calls[0].function.parsed_arguments, GetWeather), f"auto call: {msg}")
# The call and its result go back; the model answers or calls again.
history = weather_q + [msg.model_dump(exclude_none=True, exclude={"parsed"}),
                       {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": '{"temperature": 21}'}]
for m in history[1:2]:
    for tc in m.get("tool_calls", []):
        tc["function"].pop("parsed_arguments", None)
c = client.chat.completions.create(model=CHAT, messages=history, tools=tools, temperature=0, max_tokens=60)
check(c.choices[0].message.content or c.choices[0].message.tool_calls, f"a tool result continues: {c.choices[0]}")
# Streamed: the client reassembles the call from its deltas.
stream = client.chat.completions.create(model=CHAT, messages=weather_q, tools=tools, tool_choice="required",
                                        temperature=0, stream=True)
parts = {}
for chunk in stream:
    for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
        p = parts.setdefault(tc.index, {"name": "", "arguments": ""})
        p["name"] += (tc.function and tc.function.name) or ""
        p["arguments"] += (tc.function and tc.function.arguments) or ""
whole = client.chat.completions.create(model=CHAT, messages=weather_q, tools=tools, tool_choice="required",
                                       temperature=0).choices[0].message.tool_calls
check([(p["name"], json.loads(p["arguments"])) for p in parts.values()]
      == [(t.function.name, json.loads(t.function.arguments)) for t in whole], f"streamed calls: {parts} vs {whole}")
try:
    client.chat.completions.create(model=CHAT, messages=messages, tools=[{"type": "retrieval"}])
    check(False, "a non-function tool is refused")
except openai.BadRequestError as e:
    check(e.body.get("param") == "tools[0]", f"400 names tools[0]: {e.body}")

# Errors arrive as the client's exceptions.
try:
    client.chat.completions.create(model=CHAT, messages=messages, temperature=-1)
    check(False, "temperature -1 is refused")
except openai.BadRequestError as e:
    check(e.status_code == 400 and e.body.get("param") == "temperature", f"400 names the param: {e.body}")
try:
    client.chat.completions.create(model=CHAT, messages=messages, logprobs=True, top_logprobs=21)
    check(False, "top_logprobs 21 is refused")
except openai.BadRequestError as e:
    check(e.body.get("param") == "top_logprobs", f"400 names top_logprobs: {e.body}")
try:
    client.chat.completions.create(model=CHAT, messages=messages, n=100)
    check(False, "n over the limit is refused")
except openai.BadRequestError as e:
    check(e.body.get("param") == "n", f"400 names n: {e.body}")
try:
    OpenAI(base_url=URL, api_key="wrong", max_retries=0).models.list()
    check(False, "a wrong key is refused")
except openai.AuthenticationError as e:
    check(e.status_code == 401, "401")

print(f"openai {openai.__version__}: {checks} checks passed")
