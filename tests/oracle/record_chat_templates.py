#!/usr/bin/env python3
"""Record how Python transformers renders real chat templates, for the C++ Jinja tests.

What it does
    For every template listed in tests/chat_templates/templates.json and every
    conversation in tests/chat_templates/conversations.json (all combinations),
    it renders the template through transformers' own code path,
    ``transformers.utils.chat_template_utils.render_jinja_template`` -- the
    function ``tokenizer.apply_chat_template(..., tokenize=False)`` calls --
    after the same input preparation that ``apply_chat_template`` does:

      * each message is normalised with ``_normalize_chat_messages`` (keys whose
        value is None/null are dropped, e.g. ``"content": null`` next to
        ``tool_calls``);
      * ``continue_final_message`` together with ``add_generation_prompt`` is
        refused with the same ValueError;
      * the tokenizer's special tokens are passed as template variables: here
        ``bos_token`` / ``eos_token`` from templates.json, left out when the
        model has none (null), exactly as ``special_tokens_map`` leaves them out;
        the conversation's extra kwargs (e.g. ``enable_thinking``) are passed
        after them and win on a clash.

    A template may raise for some conversations (e.g. Gemma refuses a system
    message, Mistral refuses short tool call ids); that is recorded as data:
    the case then has ``error`` (``"<ExceptionType>: <message>"``) instead of
    ``output``.

    Templates whose bytes are identical to an earlier one (``identical_to`` in
    templates.json: Llama 3.3 = Llama 3.1, Hermes 3 tool_use = Hermes 2 Pro
    tool_use) are rendered once, under the first name; ``template_aliases``
    in the output maps the others to it.

    It also records:
      * ``tokenizer_config_cases``: the files in tests/chat_templates/
        tokenizer_configs/ read the way transformers reads a tokenizer_config.json
        ``chat_template`` (a string, or a list of {"name", "template"} turned
        into a dict), the template chosen by transformers'
        ``PreTrainedTokenizerBase.get_chat_template`` (``tool_use`` when tools
        are given and it exists, else ``default``), rendered on a few
        conversations, with bos/eos taken from the config when it has them
        (else from _CONFIG_FALLBACK_TOKENS);
      * ``env_cases``: small probe templates (written here, not from any model)
        rendered with transformers' own compiled Jinja environment
        (``_compile_jinja_template``: ImmutableSandboxedEnvironment with
        trim_blocks, lstrip_blocks, loopcontrols, transformers' ``tojson``
        (ensure_ascii=False, indent, separators, sort_keys), raise_exception,
        strftime_now, dict, namespace).  They pin down the filters/tests and
        value formatting that the model templates lean on, tool definitions
        through ``tojson(indent=4)`` among them.

Time
    ``strftime_now`` would read the clock. The recorder replaces the
    ``datetime`` class that chat_template_utils uses with one whose ``now()``
    returns FIXED_TIME (naive, local time), written to the JSON as
    ``fixed_time``; the C++ side must give its strftime_now the same instant.

Output
    tests/chat_templates/expected_renders.json (UTF-8, ensure_ascii=False):
    {"generator", "transformers_version", "jinja2_version", "fixed_time",
     "notes", "templates" (templates.json), "template_aliases",
     "conversations" (conversations.json, as given: before normalisation),
     "cases": [{"template", "conversation", "kwargs", "output" | "error"}],
     "tokenizer_config_cases": [...], "env_cases": [...]}
    ``kwargs`` holds every input besides messages/tools/documents (those are
    in ``conversations`` under the conversation's name): add_generation_prompt,
    continue_final_message, bos_token/eos_token when passed, and the extra
    template variables.  JSON numbers keep their type: 2.0 is a float and must
    stay one (tojson prints it as 2.0), 3 is an int.

Re-recording
    Versions used for the checked-in JSON: transformers 5.24.0, jinja2 3.1.6
    (both are written into the JSON).  From the repository root:

        .venv-oracle/bin/python tests/oracle/record_chat_templates.py

    (``--check`` renders again and exits 1 if the result differs from the
    checked-in JSON, without writing it.)  Nothing else needs Python: CI and
    the C++ tests only read tests/chat_templates/*.jinja, templates.json,
    conversations.json, tokenizer_configs/ and expected_renders.json.
"""

from __future__ import annotations

import argparse
import datetime as _datetime
import json
import pathlib
import sys
import types

import jinja2
import transformers
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.utils import chat_template_utils as ctu

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "chat_templates"
OUT = DATA / "expected_renders.json"

# The instant strftime_now() sees. Naive local time; a Sunday.
FIXED_TIME = _datetime.datetime(2026, 7, 26, 10, 30, 0)


class _FrozenDatetime(_datetime.datetime):
    @classmethod
    def now(cls, tz=None):  # noqa: D401 - same signature as datetime.now
        if tz is not None:
            return FIXED_TIME.replace(tzinfo=tz)
        return FIXED_TIME

    @classmethod
    def today(cls):
        return FIXED_TIME


def freeze_time() -> None:
    # chat_template_utils does `from datetime import datetime` and its strftime_now
    # calls `datetime.now()` at render time, through the module global.
    ctu.datetime = _FrozenDatetime


# Keys of a conversation case that are not template kwargs.
_CASE_KEYS = {"name", "messages", "tools", "documents", "add_generation_prompt", "continue_final_message"}

# Conversations used for the tokenizer_config cases (a few, to exercise the read path).
_CONFIG_CONVERSATIONS = ["system_user", "multi_turn", "tool_call_dict_arguments", "non_ascii"]


def render_like_apply_chat_template(template: str, case: dict, special_tokens: dict) -> tuple[dict, dict]:
    """Returns (kwargs recorded, result) where result is {"output": str} or {"error": str}."""
    add_generation_prompt = bool(case.get("add_generation_prompt", False))
    continue_final_message = case.get("continue_final_message", False)
    extra = {k: v for k, v in case.items() if k not in _CASE_KEYS}
    template_kwargs = {k: v for k, v in special_tokens.items() if v is not None}
    template_kwargs.update(extra)
    recorded = {"add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message}
    recorded.update(template_kwargs)
    try:
        messages = case["messages"]
        if len(messages) == 0:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        messages = ctu._normalize_chat_messages(messages)
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message "
                "when you want the model to continue the final message, and add_generation_prompt when you want to "
                "add a header that will prompt it to start a new assistant message instead."
            )
        rendered, _ = ctu.render_jinja_template(
            conversations=[messages],
            tools=case.get("tools"),
            documents=case.get("documents"),
            chat_template=template,
            continue_final_message=continue_final_message,
            add_generation_prompt=add_generation_prompt,
            **template_kwargs,
        )
        return recorded, {"output": rendered[0]}
    except Exception as e:  # a template raising is data
        return recorded, {"error": f"{type(e).__name__}: {e}"}


# Some kept configs carry only the chat_template; their model's special tokens are given here instead.
_CONFIG_FALLBACK_TOKENS = {
    "meta-llama-Meta-Llama-3-8B-Instruct.json": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "microsoft-Phi-3.5-mini-instruct.json": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
}


def _token_text(tok):
    # tokenizer_config.json stores special tokens as a string or as an AddedToken dict.
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def tokenizer_config_cases(conversations: dict) -> list[dict]:
    cases = []
    for path in sorted((DATA / "tokenizer_configs").glob("*.json")):
        cfg = json.loads(path.read_text(encoding="utf-8"))
        chat_template = cfg.get("chat_template")
        if isinstance(chat_template, (list, tuple)):
            # as PreTrainedTokenizerBase.__init__ does
            chat_template = {t["name"]: t["template"] for t in chat_template}
        fake_tokenizer = types.SimpleNamespace(chat_template=chat_template)
        fallback = _CONFIG_FALLBACK_TOKENS.get(path.name, {})
        special = {
            key: _token_text(cfg[key]) if key in cfg else fallback.get(key) for key in ("bos_token", "eos_token")
        }
        for name in _CONFIG_CONVERSATIONS:
            case = conversations[name]
            entry = {"config": f"tokenizer_configs/{path.name}", "conversation": name}
            try:
                template = PreTrainedTokenizerBase.get_chat_template(fake_tokenizer, None, case.get("tools"))
            except Exception as e:
                entry.update(kwargs={}, error=f"{type(e).__name__}: {e}")
                cases.append(entry)
                continue
            if isinstance(chat_template, dict):
                entry["selected_template"] = next(k for k, v in chat_template.items() if v is template)
            kwargs, result = render_like_apply_chat_template(template, case, special)
            entry["kwargs"] = kwargs
            entry.update(result)
            cases.append(entry)
    return cases


# ---------------------------------------------------------------------------------------------
# Probe templates for the environment itself (not from any model).

_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather. Quotes \" and ' and <html> & unicode: é 東京 😀",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "default": 3},
            },
            "required": ["location"],
        },
    },
}
_VALUES = {
    "f": 0.1, "g": 1e-05, "h": 2.0, "big": 12345678901234, "neg": -2.5, "i": 3, "t": True, "n": None,
    "s": "a \"quoted\" \\ back\nslash </script> é", "lst": [1, 2.5, "x", False, None], "empty": {}, "huge": 1e21,
    "small": 1.5e-07, "third": 1 / 3,
}

ENV_PROBES: list[tuple[str, str, dict]] = [
    ("tojson_default", "{{ v | tojson }}", {"v": _VALUES}),
    ("tojson_indent4_tool", "{{ tool | tojson(indent=4) }}", {"tool": _TOOL}),
    ("tojson_indent2", "{{ tool | tojson(indent=2) }}", {"tool": _TOOL}),
    ("tojson_sort_keys", "{{ v | tojson(sort_keys=True) }}", {"v": _VALUES}),
    ("tojson_separators", "{{ v | tojson(separators=(',', ':')) }}", {"v": _VALUES}),
    ("tojson_ensure_ascii", "{{ tool | tojson(ensure_ascii=True) }}", {"tool": _TOOL}),
    ("tojson_string", "{{ s | tojson }}|{{ 'plain' | tojson }}|{{ '' | tojson }}", {"s": _VALUES["s"]}),
    ("tojson_scalars", "{{ 1 | tojson }} {{ 1.0 | tojson }} {{ none | tojson }} {{ true | tojson }} {{ [] | tojson }}", {}),
    ("tools_loop_indent4",
     "{%- for t in tools %}\n{{- t | tojson(indent=4) }}\n{{- \"\\n\\n\" }}\n{%- endfor %}\n",
     {"tools": [_TOOL, {"type": "function", "function": {"name": "noop", "description": "", "parameters": {"type": "object", "properties": {}}}}]}),
    ("tool_items_loop",
     "{%- for key, val in tool.function.items() if key != 'return' %}{{ key }}={% if val is string %}\"{{ val }}\"{% else %}{{ val | tojson }}{% endif %}{% if not loop.last %}, {% endif %}{% endfor %}",
     {"tool": _TOOL}),
    ("print_values", "{{ f }}|{{ g }}|{{ h }}|{{ big }}|{{ neg }}|{{ i }}|{{ t }}|{{ n }}|{{ huge }}|{{ small }}|{{ third }}", _VALUES),
    ("print_containers", "{{ lst }}|{{ empty }}|{{ {'a': 1, 'b': [true, none, 'x']} }}|{{ ('t', 1) }}", _VALUES),
    ("arithmetic", "{{ 10 / 4 }} {{ 10 // 4 }} {{ 10 % 4 }} {{ 2 ** 10 }} {{ 0.1 + 0.2 }} {{ 7 - 10 }} {{ -3 // 2 }} {{ 3 * 'ab' }} {{ 1 + 2.0 }}", {}),
    ("string_concat", "{{ 'a' + 'b' }}|{{ 'n=' ~ 3 ~ none ~ true }}|{{ 'x' * 3 }}|{{ \"it's\" }}|{{ 'say \"hi\"' }}", {}),
    ("string_methods",
     "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|"
     "{{ s.startswith('  He') }}|{{ s.endswith('! ') }}|{{ s.split(',') }}|{{ s.split() }}|{{ s.replace('l', 'L') }}|"
     "{{ s.strip().split(', ')[1] }}|{{ s.find('o') }}|{{ s.count('l') }}|{{ s.capitalize() }}",
     {"s": "  Hello, world! "}),
    ("string_filters",
     "{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ s | title }}|{{ s | capitalize }}|{{ s | length }}|"
     "{{ s | replace('o', '0') }}|{{ s | trim | list | first }}|{{ s | trim | reverse }}|{{ s | wordcount }}|{{ s | center(20) }}|{{ s | string }}",
     {"s": "  hello wORLD  "}),
    ("slicing", "{{ s[-9:] }}|{{ s[:3] }}|{{ s[::-1] }}|{{ s[2:5] }}|{{ l[1:] }}|{{ l[-1] }}|{{ l[:-1] }}|{{ l[::2] }}",
     {"s": "call_abcdefghijk", "l": [1, 2, 3, 4, 5]}),
    ("tests",
     "{% for v in vals %}{{ v is string }}{{ v is number }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}"
     "{{ v is none }}{{ v is boolean }}{{ v is integer }}{{ v is float }}{{ v is defined }};{% endfor %}"
     "{{ missing is defined }}{{ missing is undefined }}{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 2 is even }}",
     {"vals": ["s", 1, 1.5, True, None, [1], {"a": 1}, ""]}),
    ("in_operator", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in ['a'] }}", {}),
    ("comparisons", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1] == [1] }} {{ none == none }} {{ 1 != 2 }} {{ 2 > 1 and not false or false }}", {}),
    ("loop_variables",
     "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}"
     "{% if loop.previtem is defined %}/p={{ loop.previtem }}{% endif %}{% if loop.nextitem is defined %}/n={{ loop.nextitem }}{% endif %};{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("loop_cycle_else", "{% for x in xs %}{{ loop.cycle('odd', 'even') }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_filter_break_continue",
     "{% for x in xs if x != 3 %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     {"xs": [1, 2, 3, 4, 5, 6]}),
    ("namespace_counter",
     "{%- set ns = namespace(count=0, last=none, flag=false) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.count = ns.count + 1 %}{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}{{ ns.count }}/{{ ns.last }}/{{ ns.flag }}",
     {"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]{{ body | length }}", {"name": "Zoë"}),
    ("macro_defaults",
     "{% macro render(item, prefix='- ', suffix='') %}{{ prefix }}{{ item }}{{ suffix }}{% endmacro %}"
     "{{ render('a') }}|{{ render('b', '* ') }}|{{ render('c', suffix='!') }}",
     {}),
    ("macro_recursive_json_type",
     "{%- macro t(s) %}{%- if s.type == 'array' %}list[{{- t(s['items']) }}]{%- elif s.type == 'object' %}dict{%- else %}{{ s.type }}{%- endif %}{%- endmacro %}"
     "{{ t({'type': 'array', 'items': {'type': 'array', 'items': {'type': 'string'}}}) }}",
     {}),
    ("dict_ops",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('zz', 'dflt') }}|"
     "{{ d['b'] }}|{{ d.b }}|{{ d | length }}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{{ 'a' in d }}|{{ dict(x=1, y='z') }}",
     {"d": {"b": 2, "a": 1, "c": [3]}}),
    ("list_filters",
     "{{ xs | length }}|{{ xs | first }}|{{ xs | last }}|{{ xs | join(', ') }}|{{ xs | sort | list }}|{{ xs | reverse | list }}|"
     "{{ xs | unique | list }}|{{ xs | min }}|{{ xs | max }}|{{ xs | sum }}|{{ [[1, 2], [3]] | sum(start=[]) }}|{{ xs | map('string') | join('') }}|{{ xs | batch(2) | list }}",
     {"xs": [3, 1, 2, 3]}),
    ("selectattr_map",
     "{{ ms | selectattr('role', 'equalto', 'user') | list | length }}|{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='content') | join('/') }}|"
     "{{ ms | map(attribute='role') | list }}|{{ ms | selectattr('tool_calls', 'defined') | list | length }}|{{ ms | selectattr('content') | list | length }}|"
     "{{ ms | map(attribute='missing', default='?') | join('') }}|{{ ms | groupby('role') | map(attribute='grouper') | list }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": []}, {"role": "user", "content": "c"}]}),
    ("default_filter", "{{ missing | default('d') }}|{{ none | default('d') }}|{{ none | default('d', true) }}|{{ '' | default('e', true) }}|{{ x | default(5) }}", {"x": 0}),
    ("int_float_string_filters", "{{ '42' | int }} {{ '3.5' | float }} {{ 3.9 | int }} {{ 3 | float }} {{ 42 | string }} {{ 1.0 | string }} {{ true | string }} {{ none | string }} {{ -0.0 }} {{ 3.14159 | round(2) }} {{ 7 | abs }}", {}),
    ("format_and_percent", "{{ '%s is %d years' | format('Ana', 41) }}|{{ '%.2f' | format(3.14159) }}|{{ '%05d' % 42 }}", {}),
    ("indent_wordwrap_filters", "{{ text | indent(4) }}|{{ text | indent(2, true) }}|{{ 'a,b,c' | replace(',', '\\n') }}", {"text": "line1\nline2\nline3"}),
    ("whitespace_control",
     "A\n{% if true %}\n  B\n{% endif %}\n  {% for i in [1, 2] %}\n  {{ i }}\n  {% endfor %}\nC {{- ' D ' -}} E\n   {%- if true %} F {% endif -%}\n  G",
     {}),
    ("comments_and_raw", "a{# comment #}b{% raw %}{{ not rendered }}{% endraw %}c {#- trimmed -#} d", {}),
    ("conditional_expressions", "{{ 'yes' if x else 'no' }}|{{ 'yes' if not x else 'no' }}|{{ (x and 'a') or 'b' }}|{{ x if x is defined }}|[{{ y if false }}]", {"x": 0}),
    ("nested_access", "{{ m.tool_calls[0].function.name }}|{{ m['tool_calls'][0]['function']['arguments'] | tojson }}|{{ m.tool_calls[0].function.arguments.location }}",
     {"m": {"tool_calls": [{"function": {"name": "get_weather", "arguments": {"location": "Paris", "n": 0.5}}}]}}),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%A %H:%M:%S') }}|{{ strftime_now('%-d %j %y %a %p %I') }}", {}),
    ("raise_exception", "before{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}after", {}),
    ("undefined_behaviour", "[{{ missing }}]|[{{ obj.missing }}]|{{ missing is none }}|{{ (missing or 'fallback') }}|{{ obj.get('missing') is none }}", {"obj": {}}),
    ("undefined_attribute_error", "{{ missing.attr }}", {}),
    ("none_concat_error", "{{ 'a' + none }}", {}),
    ("items_iteration_order", "{% for k in d %}{{ k }}{% endfor %}|{{ d | tojson }}", {"d": {"z": 1, "a": 2, "m": 3, "é": 4, "10": 5, "2": 6}}),
    ("json_roundtrip_of_string_arguments", "{{ args }}|{{ args | tojson }}|{{ args is string }}", {"args": "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}"}),
    ("unicode_filters", "{{ s | length }}|{{ s | upper }}|{{ s[0] }}|{{ s[-1] }}|{{ s | reverse }}|{{ s | tojson }}", {"s": "éß東京😀"}),
    ("trim_blocks_newlines", "{% for m in ms %}\n<{{ m }}>\n{% endfor %}\nend\n", {"ms": ["a", "b"]}),
    ("bools_and_none_printing", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [true, none] }} {{ {'k': false} }}", {}),
]


def env_cases() -> list[dict]:
    cases = []
    for name, template, context in ENV_PROBES:
        entry = {"name": name, "template": template, "context": context}
        try:
            entry["output"] = ctu._compile_jinja_template(template).render(**context)
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        cases.append(entry)
    return cases


def build() -> dict:
    freeze_time()
    templates = json.loads((DATA / "templates.json").read_text(encoding="utf-8"))
    conversation_list = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    conversations = {c["name"]: c for c in conversation_list}
    assert len(conversations) == len(conversation_list), "conversation names must be unique"

    aliases = {t["file"]: t["identical_to"] for t in templates if "identical_to" in t}
    cases = []
    for t in templates:
        if t["file"] in aliases:
            continue
        source = (DATA / t["file"]).read_bytes().decode("utf-8")
        special = {"bos_token": t.get("bos_token"), "eos_token": t.get("eos_token")}
        for conv in conversation_list:
            kwargs, result = render_like_apply_chat_template(source, conv, special)
            case = {"template": t["file"], "conversation": conv["name"], "kwargs": kwargs}
            case.update(result)
            cases.append(case)

    return {
        "generator": "tests/oracle/record_chat_templates.py",
        "transformers_version": transformers.__version__,
        "jinja2_version": jinja2.__version__,
        "fixed_time": FIXED_TIME.isoformat(),
        "notes": [
            "output = transformers.utils.chat_template_utils.render_jinja_template(...)[0][0], i.e. "
            "tokenizer.apply_chat_template(messages, tokenize=False, ...), including its continue_final_message "
            "post-processing (the final message is tagged, rendered, and the text after it is cut off).",
            "Messages are normalised first as apply_chat_template does: keys whose value is null are dropped.",
            "bos_token/eos_token are passed only when the model has one (see kwargs).",
            "strftime_now() returns fixed_time (naive local time) formatted with the given strftime format.",
            "Templates render in ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
            "extensions=[loopcontrols, generation tag]); tojson = json.dumps(x, ensure_ascii=False, indent=None, "
            "separators=None, sort_keys=False) unless the template passes those arguments.",
            "error = '<ExceptionType>: <message>' of the exception the render raised.",
        ],
        "templates": templates,
        "template_aliases": aliases,
        "conversations": conversation_list,
        "cases": cases,
        "tokenizer_config_cases": tokenizer_config_cases(conversations),
        "env_cases": env_cases(),
    }


def dumps(result: dict) -> str:
    return json.dumps(result, ensure_ascii=False, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the checked-in JSON instead of writing it")
    parser.add_argument("--output", type=pathlib.Path, default=OUT)
    args = parser.parse_args()

    text = dumps(build())
    result = json.loads(text)
    ok = sum(1 for c in result["cases"] if "output" in c)
    print(
        f"{len(result['cases'])} cases ({ok} ok, {len(result['cases']) - ok} error), "
        f"{len(result['tokenizer_config_cases'])} tokenizer_config cases, {len(result['env_cases'])} env cases, "
        f"{len(text.encode('utf-8'))} bytes",
        file=sys.stderr,
    )
    if args.check:
        old = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if old != text:
            print(f"{args.output} is out of date; re-run without --check", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
