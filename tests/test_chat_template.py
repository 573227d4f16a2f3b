"""Chat templates without a model: the named ones render their published formats, and
exactly what llama.cpp's built-in formatter of the same name writes; a template given as text
is Jinja, sandboxed; `prompt` leaves the generation prompt off, continues the last assistant
message, and refuses what llama-server refuses; `template_source` reads the flags as
llama-server does."""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path

import pytest

from lookahead.errors import ConfigError, UserError
from lookahead.models.chat_formats import BUILTIN
from lookahead.models.chat_template import ChatTemplate, ChatTemplateError, template_source

SYSTEM_USER = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]

# Each format as its model family publishes it, for a system message and one user turn,
# generation prompt added.
KNOWN = {
    "chatml": "<|im_start|>system\nYou are a test.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
    "<|im_start|>assistant\n",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "command-r": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    # Gemma has no system turn: the system text opens the user's
    "gemma": "<start_of_turn>user\nYou are a test.\n\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "llama2-sys": "[INST] <<SYS>>\nYou are a test.\n<</SYS>>\n\nHi there [/INST]",
    "mistral-v7": "[SYSTEM_PROMPT] You are a test.[/SYSTEM_PROMPT][INST] Hi there[/INST]",
    "mistral-v3": "[INST] You are a test.\n\nHi there[/INST]",
    "phi3": "<|system|>\nYou are a test.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n",
    "zephyr": "<|system|>\nYou are a test.<|endoftext|>\n<|user|>\nHi there<|endoftext|>\n<|assistant|>\n",
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "  You are a test. "}, {"role": "user", "content": "Hi there\n"}],
    [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": " q1 "},
        {"role": "assistant", "content": " a1 \n"},
        {"role": "user", "content": "q2"},
    ],
    [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ],
    [{"role": "system", "content": "s1"}, {"role": "system", "content": "s2"}, {"role": "user", "content": "é ü 中"}],
]


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_a_named_template_renders_its_published_format(name: str) -> None:
    assert ChatTemplate(BUILTIN[name]).render(SYSTEM_USER) == KNOWN[name]


def llama_cpp_render(name: str, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """What llama.cpp's built-in formatter `name` writes (its C API, no model needed)."""
    ll = pytest.importorskip("llama_cpp")
    chat = (ll.llama_chat_message * len(messages))(
        *[ll.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages]
    )
    buf = ctypes.create_string_buffer(1 << 16)
    n = ll.llama_chat_apply_template(name.encode(), chat, len(messages), add_generation_prompt, buf, len(buf))
    assert 0 <= n <= len(buf), f"llama.cpp does not know the template {name}"
    return buf.raw[:n].decode("utf-8")


@pytest.mark.parametrize("name", list(BUILTIN))
def test_a_named_template_writes_what_llama_cpp_writes_under_that_name(name: str) -> None:
    template = ChatTemplate(BUILTIN[name])
    for messages, add in itertools.product(CONVERSATIONS, (True, False)):
        assert template.render(messages, add) == llama_cpp_render(name, messages, add), (messages, add)


def test_bos_and_eos_reach_the_template() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}", "<s>", "</s>"
    )
    assert template.render([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "<s>a</s>b</s>"


def test_a_template_runs_in_the_sandbox() -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplate(escape).render([{"role": "user", "content": "x"}])
    mutate = "{% set _ = messages.append({'role': 'user'}) %}{{ messages | length }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplate(mutate).render([{"role": "user", "content": "x"}])


def test_raise_exception_in_a_template_is_a_refusal_of_the_messages() -> None:
    template = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok")
    assert template.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="user first"):
        template.render([{"role": "assistant", "content": "x"}])


LLAMA3 = ChatTemplate(BUILTIN["llama3"])
HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"


def test_add_generation_prompt_false_leaves_the_assistant_turn_unopened() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    assert (
        LLAMA3.prompt(messages)
        == LLAMA3.render(messages)
        == "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" + HEADER
    )
    assert (
        LLAMA3.prompt(messages, add_generation_prompt=False)
        == "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    )


def test_continue_final_message_goes_on_writing_the_assistant_message() -> None:
    messages = [
        {"role": "system", "content": "Book"},
        {"role": "user", "content": "What is the best book"},
        {"role": "assistant", "content": "Whill"},
    ]
    expected = LLAMA3.render(messages[:2]) + "Whill"
    assert expected.endswith("What is the best book<|eot_id|>" + HEADER + "Whill")
    assert LLAMA3.prompt(messages, add_generation_prompt=False, continue_final_message=True) == expected
    # llama.cpp's prefill: a conversation that ends with the assistant is continued as well
    assert LLAMA3.prompt(messages) == expected
    # told not to continue: the assistant's message is closed, and a new turn opened
    closed = LLAMA3.prompt(messages, continue_final_message=False)
    assert closed == LLAMA3.render(messages) and closed.endswith("Whill<|eot_id|>" + HEADER)


def test_continuing_and_opening_a_new_turn_together_is_refused() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    with pytest.raises(UserError, match="cannot both be true"):
        LLAMA3.prompt(messages, add_generation_prompt=True, continue_final_message=True)


def test_two_assistant_messages_at_the_end_are_refused() -> None:
    messages = [
        {"role": "user", "content": "test"},
        {"role": "assistant", "content": "test"},
        {"role": "assistant", "content": "test"},
    ]
    with pytest.raises(UserError, match="2 or more assistant messages"):
        LLAMA3.prompt(messages)


def test_only_an_assistant_message_can_be_continued() -> None:
    with pytest.raises(UserError, match="not one"):
        LLAMA3.prompt([{"role": "user", "content": "Hi"}], add_generation_prompt=False, continue_final_message=True)


def test_a_name_is_that_template_and_other_text_is_jinja() -> None:
    assert template_source("command-r") == BUILTIN["command-r"]
    assert template_source(None) is None
    text = "This is not a chat template, it is"
    assert template_source(text) == text
    assert ChatTemplate(text).render(SYSTEM_USER) == text


def test_jinja_flag_reads_names_as_llama_server_does() -> None:
    # --jinja: the text is Jinja even when it is a name, chatml aside
    assert template_source("llama3", jinja=True) == "llama3"
    assert template_source("chatml", jinja=True) == BUILTIN["chatml"]
    # --no-jinja: names only
    assert template_source("gemma", jinja=False) == BUILTIN["gemma"]
    with pytest.raises(ConfigError, match="unknown chat template name 'llama-7'"):
        template_source("llama-7", jinja=False)


def test_a_broken_template_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid Jinja"):
        template_source("{% for m in messages %}{{ m.content }")
    with pytest.raises(ConfigError, match="cannot render a user message"):
        template_source("{{ raise_exception('no') }}")
    with pytest.raises(ConfigError, match="empty"):
        template_source("  ")


def test_a_template_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", encoding="utf-8")
    source = template_source(None, path)
    assert (
        source is not None and ChatTemplate(source).render(SYSTEM_USER) == "[system] You are a test.\n[user] Hi there\n"
    )
    with pytest.raises(ConfigError, match="cannot read --chat-template-file"):
        template_source(None, tmp_path / "missing.jinja")
    with pytest.raises(ConfigError, match="not both"):
        template_source("chatml", path)


def test_a_conversation_of_one_assistant_message_continues_after_the_opened_turn() -> None:
    chatml = ChatTemplate(BUILTIN["chatml"])
    assert chatml.prompt([{"role": "assistant", "content": "Once"}]) == "<|im_start|>assistant\nOnce"
