"""Chat templates by name, as llama.cpp's `--chat-template NAME` knows them.

Each entry is a Jinja template written from the published prompt format of that model
family, rendering what llama.cpp's built-in formatter of the same name writes for the same
messages, character for character (the tests compare the two). A name a model's GGUF file
does not need is for a model whose own template is missing, wrong, or not wanted.

The templates see `messages` (each with `role` and `content`) and `add_generation_prompt`;
several formats write nothing for the generation prompt, as llama.cpp's do not.
"""

from __future__ import annotations

# Each template writes its text through expressions ({{ ... }}) only, never as template
# text between tags, so the environment's whitespace rules (trim_blocks, lstrip_blocks)
# cannot change a character of it.

_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _llama2(system: bool, bos_inside: bool, strip: bool) -> str:
    """Llama 2 ([INST] ... [/INST]) and llama.cpp's variants: with a <<SYS>> block for the
    system message (else the system text opens the first turn), with <s> before each later
    turn, with every message stripped of surrounding whitespace."""
    content = "(m.content | trim)" if strip else "m.content"
    sys_text = f"'<<SYS>>\\n' + {content} + '\\n<</SYS>>\\n\\n'" if system else f"{content} + '\\n'"
    reopen = "'<s>[INST] '" if bos_inside else "'[INST] '"
    return (
        "{% set ns = namespace(inside=true) %}{{ '[INST] ' }}{% for m in messages %}"
        f"{{% if not ns.inside %}}{{% set ns.inside = true %}}{{{{ {reopen} }}}}{{% endif %}}"
        f"{{% if m.role == 'system' %}}{{{{ {sys_text} }}}}"
        f"{{% elif m.role == 'user' %}}{{{{ {content} + ' [/INST]' }}}}"
        f"{{% else %}}{{{{ {content} + '</s>' }}}}{{% set ns.inside = false %}}{{% endif %}}"
        "{% endfor %}"
    )


def _mistral(lead: str, trail: str, trim_assistant: bool) -> str:
    """Mistral's v1 / v3 / v3-tekken formats: a system message goes inside the first [INST]."""
    answer = "(m.content | trim)" if trim_assistant else "m.content"
    return (
        "{% set ns = namespace(inside=false) %}{% for m in messages %}"
        f"{{% if not ns.inside %}}{{{{ '{lead}[INST]{trail}' }}}}{{% set ns.inside = true %}}{{% endif %}}"
        "{% if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
        f"{{% elif m.role == 'user' %}}{{{{ m.content + '{lead}[/INST]' }}}}"
        f"{{% else %}}{{{{ '{trail}' + {answer} + '</s>' }}}}{{% set ns.inside = false %}}{{% endif %}}"
        "{% endfor %}"
    )


def _mistral_v7(space: str) -> str:
    return (
        "{% for m in messages %}"
        f"{{% if m.role == 'system' %}}{{{{ '[SYSTEM_PROMPT]{space}' + m.content + '[/SYSTEM_PROMPT]' }}}}"
        f"{{% elif m.role == 'user' %}}{{{{ '[INST]{space}' + m.content + '[/INST]' }}}}"
        f"{{% else %}}{{{{ '{space}' + m.content + '</s>' }}}}{{% endif %}}"
        "{% endfor %}"
    )


def _turns(open_: str, close: str, gen: str, trim: bool = False) -> str:
    """One block per message, `open_` and `close` Jinja expressions around its content
    (`role` is the message's role), then `gen` when asked for the generation prompt."""
    content = "(m.content | trim)" if trim else "m.content"
    return (
        f"{{% for m in messages %}}{{% set role = m.role %}}{{{{ {open_} + {content} + {close} }}}}{{% endfor %}}"
        f"{{% if add_generation_prompt %}}{{{{ {gen} }}}}{{% endif %}}"
    )


_GEMMA = (
    # Gemma has no system turn: system text (stripped) opens the next user turn
    "{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m.role == 'system' %}{% set ns.system = ns.system + (m.content | trim) %}{% else %}"
    "{% set role = 'model' if m.role == 'assistant' else m.role %}"
    "{{ '<start_of_turn>' + role + '\\n' }}"
    "{% if ns.system and role != 'model' %}{{ ns.system + '\\n\\n' }}{% set ns.system = '' %}{% endif %}"
    "{{ (m.content | trim) + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

_COMMAND_R = (
    "{% set tag = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', 'assistant': '<|CHATBOT_TOKEN|>'} %}"
    "{% for m in messages %}{% if m.role in tag %}"
    "{{ '<|START_OF_TURN_TOKEN|>' + tag[m.role] + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"
)

_DEEPSEEK = (
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}"
    "{% elif m.role == 'user' %}{{ '### Instruction:\\n' + m.content + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ '### Response:\\n' + m.content + '\\n<|EOT|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '### Response:\\n' }}{% endif %}"
)


def _vicuna(orca: bool) -> str:
    system = "'SYSTEM: ' + m.content + '\\n'" if orca else "m.content + '\\n\\n'"
    return (
        f"{{% for m in messages %}}{{% if m.role == 'system' %}}{{{{ {system} }}}}"
        "{% elif m.role == 'user' %}{{ 'USER: ' + m.content + '\\n' }}"
        "{% elif m.role == 'assistant' %}{{ 'ASSISTANT: ' + m.content + '</s>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
    )


_OPENCHAT = (
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '<|end_of_turn|>' }}"
    "{% else %}{{ 'GPT4 Correct ' + m.role[:1] | upper }}{{ m.role[1:] + ': ' + m.content + '<|end_of_turn|>' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}"
)

# name -> Jinja source; the names are llama.cpp's
BUILTIN: dict[str, str] = {
    "chatml": _CHATML,
    "llama2": _llama2(system=False, bos_inside=False, strip=False),
    "llama2-sys": _llama2(system=True, bos_inside=False, strip=False),
    "llama2-sys-bos": _llama2(system=True, bos_inside=True, strip=False),
    "llama2-sys-strip": _llama2(system=True, bos_inside=False, strip=True),
    "mistral-v1": _mistral(" ", " ", trim_assistant=False),
    "mistral-v3": _mistral("", " ", trim_assistant=True),
    "mistral-v3-tekken": _mistral("", "", trim_assistant=False),
    "mistral-v7": _mistral_v7(" "),
    "mistral-v7-tekken": _mistral_v7(""),
    "phi3": _turns("'<|' + role + '|>\\n'", "'<|end|>\\n'", "'<|assistant|>\\n'"),
    "phi4": _turns("'<|im_start|>' + role + '<|im_sep|>'", "'<|im_end|>'", "'<|im_start|>assistant<|im_sep|>'"),
    "falcon3": _turns("'<|' + role + '|>\\n'", "'\\n'", "'<|assistant|>\\n'"),
    "zephyr": _turns("'<|' + role + '|>\\n'", "'<|endoftext|>\\n'", "'<|assistant|>\\n'"),
    "gemma": _GEMMA,
    "command-r": _COMMAND_R,
    "llama3": _turns(
        "'<|start_header_id|>' + role + '<|end_header_id|>\\n\\n'",
        "'<|eot_id|>'",
        "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'",
        trim=True,
    ),
    "deepseek": _DEEPSEEK,
    "vicuna": _vicuna(orca=False),
    "vicuna-orca": _vicuna(orca=True),
    "openchat": _OPENCHAT,
}
