#!/usr/bin/env python3
"""Renders scripted conversations with Qwen3's own chat template (the Jinja2 template in
data/tokenizers/qwen3/tokenizer_config.json, rendered by the jinja2 package: an
implementation independent of anelua's) into spec/data/chat/qwen3_conversations.json, the
expectations spec/chat_spec.lua checks ane.chat against."""
import json
import jinja2

config = json.load(open("data/tokenizers/qwen3/tokenizer_config.json"))
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda v, **kw: json.dumps(v, ensure_ascii=False)
template = env.from_string(config["chat_template"])

cases = [
    {"name": "one user turn", "messages": [{"role": "user", "content": "Hello there"}],
     "add_generation_prompt": True, "enable_thinking": True},
    {"name": "system and user, thinking off", "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
     "add_generation_prompt": True, "enable_thinking": False},
    {"name": "two turns, the first answer with a think block", "messages": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "<think>\nThe user wants one colour.\n</think>\n\nBlue."},
        {"role": "user", "content": "Another one?"}],
     "add_generation_prompt": True, "enable_thinking": True},
    {"name": "a finished exchange, no generation prompt", "messages": [
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"}],
     "add_generation_prompt": False, "enable_thinking": True},
    {"name": "unicode and newlines in content", "messages": [
        {"role": "user", "content": "Translate: «ça va?»\nThanks"}],
     "add_generation_prompt": True, "enable_thinking": False},
]
for case in cases:
    kwargs = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]}
    if not case["enable_thinking"]:
        kwargs["enable_thinking"] = False
    case["text"] = template.render(**kwargs)
json.dump({"template": "data/tokenizers/qwen3/tokenizer_config.json (chat_template), rendered with jinja2 " + jinja2.__version__,
           "cases": cases}, open("spec/data/chat/qwen3_conversations.json", "w"), ensure_ascii=False, indent=1)
print(len(cases), "cases")
