"""The user's repository as a draft corpus (`lookahead complete --context`): which files
are read (.gitignore, vendored, generated, the file being completed) and the disk cache."""

from __future__ import annotations

from pathlib import Path

from lookahead.index.corpus import CorpusIndex
from lookahead.index.corpus_files import cache_file, collect_files
from lookahead.index.ignore import GitIgnore, find_repository
from tests.test_corpus import CountingTokenizer


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    write(
        repo,
        {
            ".git/info/exclude": "local_only.py\n",
            ".gitignore": "*.log\nsecret/\ngenerated_*.py\n/top_only.py\n",
            "app.py": "def main():\n    return 1\n",
            "top_only.py": "x = 1\n",
            "lib/top_only.py": "y = 2\n",
            "lib/util.py": "def helper():\n    return 2\n",
            "lib/generated_tables.py": "TABLE = [1, 2, 3]\n",
            "lib/.gitignore": "*.txt\n!keep.txt\n",
            "lib/notes.txt": "lib notes\n",
            "lib/keep.txt": "keep me\n",
            "debug.log": "log line\n",
            "secret/key.py": "KEY = 'x'\n",
            "local_only.py": "z = 3\n",
            "vendor/dep.py": "def dep(): pass\n",
            "third_party/lib.c": "int x;\n",
            "node_modules/pkg/index.js": "module.exports = 1;\n",
            "web/app.min.js": "var a=1;\n",
            "web/app.js": "function f() { return 1; }\n",
            "image.py": b"\x89PNG\0\0binary",
        },
    )
    return repo


def names(repo: Path, **kwargs: object) -> list[str]:
    return [f.name for f in collect_files([repo], ignore=GitIgnore(repo, **kwargs))]  # type: ignore[arg-type]


def test_gitignore_vendored_generated_and_binaries_are_left_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert names(repo) == [
        "repo/app.py",
        "repo/lib/keep.txt",
        "repo/lib/top_only.py",
        "repo/lib/util.py",
        "repo/web/app.js",
    ]


def test_the_file_being_completed_is_left_out(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert "repo/app.py" not in names(repo, exclude=[repo / "app.py"])
    assert "repo/lib/util.py" in names(repo, exclude=[repo / "app.py"])


def test_without_the_rule_everything_readable_is_taken(tmp_path: Path) -> None:
    # the plain --corpus behaviour is unchanged: .gitignore means nothing there
    repo = make_repo(tmp_path)
    plain = [f.name for f in collect_files([repo])]
    assert "repo/debug.log" not in plain  # not a source suffix anyway
    assert "repo/secret/key.py" in plain and "repo/vendor/dep.py" in plain


def test_find_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert find_repository(repo / "lib" / "util.py") == repo.resolve()
    assert find_repository(repo) == repo.resolve()
    loose = tmp_path / "loose"
    loose.mkdir()
    outside = next((p for p in loose.resolve().parents if (p / ".git").exists()), None)
    assert find_repository(loose) == outside  # None, unless the temp folder is in a repository
    # a worktree or submodule has a .git file, not a folder
    worktree = tmp_path / "wt"
    write(worktree, {".git": "gitdir: elsewhere\n", "a.py": "pass\n"})
    assert find_repository(worktree / "a.py") == worktree.resolve()


def test_cache_is_reused_and_rebuilt_when_a_file_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    cache = tmp_path / "cache"
    tok = CountingTokenizer()

    def build(**kwargs: object) -> CorpusIndex:
        rule = GitIgnore(repo, exclude=[repo / "app.py"])
        return CorpusIndex.load_or_build([repo], tok, "bytes", cache, ignore=rule, **kwargs)  # type: ignore[arg-type]

    first = build()
    assert "repo/secret/key.py" not in first.files and "repo/app.py" not in first.files
    built = tok.calls
    assert built == len(first.files)
    again = build()
    assert tok.calls == built and again.files == first.files  # from the cache
    # the file being completed changes at every edit: no rebuild
    (repo / "app.py").write_text("def main():\n    return 42\n", encoding="utf-8")
    build()
    assert tok.calls == built
    # an ignored file changes: no rebuild either
    (repo / "secret" / "key.py").write_text("KEY = 'y'\n", encoding="utf-8")
    build()
    assert tok.calls == built
    # a file in the index changes: rebuilt, with the new text
    (repo / "lib" / "util.py").write_text("def helper():\n    return 'changed'\n", encoding="utf-8")
    rebuilt = build()
    assert tok.calls == built + len(rebuilt.files)
    text = bytes(rebuilt.tables.tokens.astype("uint8")).decode()
    assert "changed" in text
    # a new file: rebuilt, and in the list
    (repo / "lib" / "more.py").write_text("def more():\n    pass\n", encoding="utf-8")
    assert "repo/lib/more.py" in build().files


def test_with_and_without_the_rule_cache_apart(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    params = "p"
    assert cache_file(tmp_path, [repo], "tok", params) != cache_file(
        tmp_path, [repo], "tok", params, GitIgnore(repo)
    )
