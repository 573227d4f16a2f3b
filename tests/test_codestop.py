"""The structural stop of `lookahead complete`, without a model: the text streamed so far
in, the length to keep out."""

from __future__ import annotations

import pytest

from lookahead.apps.codestop import BRACES, PYTHON, CodeStop, finish, head_of, language_of


def streamed(stop: CodeStop, completion: str) -> str:
    """What is kept when `completion` arrives one character at a time (as a stream would,
    only finer): the text up to the first cut, or all of it if none fires."""
    for n in range(1, len(completion) + 1):
        cut = stop(completion[:n])
        if cut is not None:
            return completion[:cut]
    cut = stop(completion, final=True)
    return completion if cut is None else completion[:cut]


def kept(language: str, file_with_cursor: str, completion: str) -> str:
    prefix, suffix = file_with_cursor.split("|")
    result = streamed(CodeStop(language, prefix, suffix), completion)
    # the same cut when the whole text arrives at once
    whole = CodeStop(language, prefix, suffix)(completion, final=True)
    assert result == (completion if whole is None else completion[:whole])
    return result


def test_language_of() -> None:
    assert language_of("a/b.py") == PYTHON
    assert language_of("x.PYI") == PYTHON
    assert language_of("main.rs") == BRACES
    assert language_of("app.tsx") == BRACES
    assert language_of("README.md") is None
    assert language_of("Makefile") is None


# ---- Python ----------------------------------------------------------------------------


def test_python_body_of_a_function_ends_at_the_next_definition() -> None:
    src = "import os\n\n\ndef area(w, h):|\n"
    out = kept(PYTHON, src, "\n    return w * h\n\n\ndef volume(w, h, d):\n    return w * h * d\n")
    assert out == "\n    return w * h\n\n\n"


def test_python_blank_lines_inside_a_function_do_not_stop() -> None:
    src = "def f(xs):|"
    body = "\n    total = 0\n\n    for x in xs:\n        total += x\n\n    return total\n"
    assert kept(PYTHON, src, body + "\nprint(f([1]))\n") == body + "\n"


def test_python_nested_blocks_inside_the_body_go_on() -> None:
    src = "class A:\n    def m(self, x):|"
    body = (
        "\n        if x:\n            for i in range(x):\n                if i:\n"
        "                    yield i\n        else:\n            yield 0\n"
    )
    out = kept(PYTHON, src, body + "\n    def n(self):\n        pass\n")
    assert out == body + "\n"


def test_python_cursor_inside_a_block_stops_at_its_dedent() -> None:
    # the cursor is in the `for` body (indent 8): a line back at 4 leaves it
    src = "def f(xs):\n    for x in xs:\n        y = x|\n    return y\n"
    assert kept(PYTHON, src, " * 2\n        print(y)\n    return y\n") == " * 2\n        print(y)\n"


def test_python_cursor_on_a_blank_line_takes_the_written_line_as_the_block() -> None:
    src = "def f(x):\n    y = x + 1\n|\n"
    assert kept(PYTHON, src, "    return y\n\ndef g():\n    pass") == "    return y\n\n"


def test_python_decorators_belong_to_the_definition() -> None:
    src = "import functools\n\n|"
    completion = (
        "@functools.cache\n@staticmethod\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "\n\n@functools.cache\ndef other():\n    pass\n"
    )
    out = kept(PYTHON, src, completion)
    assert out.startswith("@functools.cache\n@staticmethod\ndef fib(n):")
    assert out.endswith("fib(n - 2)\n\n\n")


def test_python_else_and_except_continue_the_statement() -> None:
    src = "if ready:|"
    body = "\n    go()\nelif later:\n    wait()\nelse:\n    stop()\n"
    assert kept(PYTHON, src, body + "print('done')\n") == body
    src = "try:|"
    body = "\n    run()\nexcept OSError:\n    pass\nfinally:\n    close()\n"
    assert kept(PYTHON, src, body + "run_again()\n") == body


def test_python_a_word_that_may_still_become_else_waits() -> None:
    stop = CodeStop(PYTHON, "if x:", "")
    assert stop("\n    a()\nel") is None
    assert stop("\n    a()\nelse") is None  # `elsewhere = 1` is still possible
    assert stop("\n    a()\nelsewhere = 1") == len("\n    a()\n")
    assert stop("\n    a()\nel", final=True) == len("\n    a()\n")


def test_python_lines_inside_brackets_and_strings_do_not_count() -> None:
    src = "def f():\n    x = call(|"
    completion = 'a,\nb,\n)\n    s = """\nno indent here\n"""\n    return x\nnext_thing()\n'
    assert kept(PYTHON, src, completion) == 'a,\nb,\n)\n    s = """\nno indent here\n"""\n    return x\n'


def test_python_multiline_header_is_one_logical_line() -> None:
    src = "|"
    completion = "def f(\n    a,\n    b,\n):\n    return a + b\n\ndef g():\n    pass\n"
    assert kept(PYTHON, src, completion) == "def f(\n    a,\n    b,\n):\n    return a + b\n\n"


def test_python_cursor_inside_an_open_call_on_an_earlier_line() -> None:
    prefix = "def f():\n    x = call(\n        a,\n        "
    assert head_of(PYTHON, prefix) == "    x = call(\n        a,\n        "
    # the call's `)` is already after the cursor: write the arguments only
    assert kept(PYTHON, prefix + "|\n    )\n", "b,\n    )\n    return x\n") == "b,\n    "


def test_python_closing_bracket_already_after_the_cursor() -> None:
    assert kept(PYTHON, "total = add(1, |)\n", "2)\nprint(total)\n") == "2"
    # not there: it is written, and the line goes on
    assert kept(PYTHON, "total = add(1, |\n", "2)\nprint(total)\n") == "2)\nprint(total)\n"


def test_python_comments_and_strings_with_brackets_and_colons() -> None:
    src = "def f():|"
    body = "\n    s = ')'  # (\n    t = 'x:'\n    return s + t  # end:\n"
    assert kept(PYTHON, src, body + "g = 1\n") == body


def test_python_tabs() -> None:
    src = "def f():\n\tx = 1|"
    assert kept(PYTHON, src, "\n\treturn x\ndef g(): pass\n") == "\n\treturn x\n"


def test_python_top_level_statement_never_dedents() -> None:
    src = "import os|"
    completion = "\nimport sys\n\nprint(os, sys)\n"
    assert kept(PYTHON, src, completion) == completion


def test_python_no_stop_before_anything_is_written() -> None:
    stop = CodeStop(PYTHON, "def f():", "")
    assert stop("") is None
    assert stop("\n") is None
    assert stop("\n    ") is None


# ---- brace languages ---------------------------------------------------------------------


# (the file, | the cursor; what is kept; what the model wrote after it)
BRACE_CASES = {
    "closing brace already after the cursor": ("int f(int x) {|\n}\n", "\n    return x * 2;\n", "}\n\nint g() {"),
    "closing brace not there is written": ("int f(int x) {|", "\n    return x * 2;\n}", "\n\nint g() {"),
    "else continues the block": (
        "    if (x) {|",
        "\n        a();\n    } else {\n        b();\n    }",
        "\n    c();\n",
    ),
    "nested blocks and blank lines inside": (
        "fn main() {\n    |\n}\n",
        'for i in 0..3 {\n        if i > 1 {\n            break;\n        }\n\n        println!("{}", i);\n    }\n',
        "}\n",
    ),
    "blank line after a whole function at top level": (
        "#include <stdio.h>\n\n|",
        "int add(int a, int b) {\n    return a + b;\n}\n",
        "\nint sub(int a, int b) {\n",
    ),
    "statements with blank lines go on": ("void f() {\n    |\n}", "a(1);\n\n    b(2);\n", "}\n"),
    "strings and comments are not code": (
        "function f() {|\n}",
        '\n  const s = "}";  // }\n  /* } */\n  const t = `\n}`;\n  return s;\n',
        "}\n",
    ),
    "rust lifetimes are not strings": (
        "impl<'a> Foo<'a> {|\n}",
        "\n    fn get(&self) -> &'a str { self.0 }\n",
        "}\n",
    ),
    "arguments before an existing paren": ('printf("%d", |);', "x", ");\nreturn 0;"),
}


@pytest.mark.parametrize(("src", "expected", "rest"), BRACE_CASES.values(), ids=BRACE_CASES.keys())
def test_braces(src: str, expected: str, rest: str) -> None:
    assert kept(BRACES, src, expected + rest) == expected


def test_other_languages_have_no_structural_stop() -> None:
    stop = CodeStop(None, "# Title\n", "")
    assert stop("text\n\n\nmore", final=True) is None


# ---- trimming ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "suffix", "expected"),
    [
        ("\n    return y\n\n\n", "\n\ndef g(): pass\n", "\n    return y"),
        ("\n    return y\n\n\n", "", "\n    return y\n"),
        ("    return y\n", "def g(): pass\n", "    return y\n"),
        ("2", ")\n", "2"),
        ("x  ", "", "x"),
    ],
)
def test_finish(completion: str, suffix: str, expected: str) -> None:
    assert finish(completion, suffix) == expected
