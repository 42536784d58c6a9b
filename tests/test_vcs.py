"""Git operations on real temporary repositories (no mocks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from kopt_mcp.errors import VcsError
from kopt_mcp.vcs import (
    EXCLUDE_LINE,
    commit_all,
    create_workspace,
    diff_against,
    ensure_best_worktree,
    ensure_excluded,
    has_branch,
    head_sha,
    open_repo,
    open_workspace,
    reset_to,
    snapshot,
    snapshot_tree,
)

ID = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    (repo / "kernel.py").write_text("def k():\n    return 1\n")
    (repo / "bench.py").write_text("print('bench')\n")
    (repo / "data.bin").write_bytes(bytes(range(256)))
    (repo / ".gitignore").write_text("build/\n*.o\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "initial")
    return repo


@pytest.fixture
def repo(tmp_path) -> git.Repo:
    return git.Repo(make_repo(tmp_path))


@pytest.fixture
def ws(repo, tmp_path) -> git.Repo:
    ensure_excluded(repo)
    return create_workspace(repo, tmp_path / "repo" / ".kopt" / "worktrees" / "t1", "kernel-opt/t1")


def wdir(r: git.Repo) -> Path:
    return Path(r.working_tree_dir)


# --- open_repo --------------------------------------------------------------------------------------


def test_open_repo_refuses_a_non_repository(tmp_path):
    with pytest.raises(VcsError, match="not a git repository"):
        open_repo(tmp_path)


def test_open_repo_refuses_a_repository_without_commit(tmp_path):
    sh(tmp_path, "init", "-q")
    with pytest.raises(VcsError, match="no commit"):
        open_repo(tmp_path)


def test_open_repo_opens_a_committed_repository(tmp_path):
    path = make_repo(tmp_path)
    assert Path(open_repo(path).working_tree_dir) == path


# --- create / open workspace --------------------------------------------------------------------------


def test_create_workspace_makes_branch_worktree_from_head(repo, tmp_path):
    path = tmp_path / "ws"
    ws = create_workspace(repo, path, "kernel-opt/t1")
    assert wdir(ws) == path
    assert ws.active_branch.name == "kernel-opt/t1"
    assert head_sha(ws) == repo.head.commit.hexsha
    assert (path / "kernel.py").read_text() == "def k():\n    return 1\n"
    assert has_branch(repo, "kernel-opt/t1")


def test_has_branch_sees_local_branches_only_including_ones_made_after_opening(repo):
    head = repo.head.commit.hexsha
    assert has_branch(repo, "main") and not has_branch(repo, "kernel-opt/t1")
    sh(wdir(repo), "tag", "kernel-opt/t1")  # a tag of that name is no branch
    sh(wdir(repo), "update-ref", "refs/remotes/origin/kernel-opt/t1", head)  # nor is a remote-tracking one
    sh(wdir(repo), "update-ref", "refs/kopt/t/attempts/0001", head)  # nor a hidden ref
    assert not has_branch(repo, "kernel-opt/t1") and not has_branch(repo, "origin/kernel-opt/t1")
    sh(wdir(repo), "branch", "kernel-opt/t1")  # made by another process after `repo` was opened
    assert has_branch(repo, "kernel-opt/t1") and not has_branch(repo, "kernel-opt") and not has_branch(repo, "t1")


def test_create_workspace_refuses_an_existing_branch(repo, tmp_path):
    sh(wdir(repo), "branch", "kernel-opt/t1")
    with pytest.raises(VcsError, match="already exists.*git branch -D kernel-opt/t1"):
        create_workspace(repo, tmp_path / "ws", "kernel-opt/t1")
    assert not (tmp_path / "ws").exists()


def test_create_workspace_refuses_an_existing_path(repo, tmp_path):
    (tmp_path / "ws").mkdir()
    with pytest.raises(VcsError, match="already exists"):
        create_workspace(repo, tmp_path / "ws", "kernel-opt/t1")
    assert not has_branch(repo, "kernel-opt/t1")


def test_open_workspace_accepts_its_own_worktree(repo, ws):
    again = open_workspace(repo, wdir(ws), "kernel-opt/t1")
    assert again.active_branch.name == "kernel-opt/t1"


def test_open_workspace_refuses_a_worktree_moved_to_another_branch(repo, ws):
    sh(wdir(ws), "checkout", "-q", "-b", "other")
    with pytest.raises(VcsError, match="HEAD was moved"):
        open_workspace(repo, wdir(ws), "kernel-opt/t1")


def test_open_workspace_refuses_a_detached_worktree(repo, ws):
    sh(wdir(ws), "checkout", "-q", "--detach")
    with pytest.raises(VcsError, match="detached"):
        open_workspace(repo, wdir(ws), "kernel-opt/t1")


def test_open_workspace_refuses_a_path_that_is_no_worktree(repo, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(VcsError, match="not a worktree"):
        open_workspace(repo, tmp_path / "elsewhere", "kernel-opt/t1")


# --- ensure_excluded ----------------------------------------------------------------------------------


def exclude_file(repo: git.Repo) -> Path:
    return wdir(repo) / ".git" / "info" / "exclude"


def test_ensure_excluded_adds_kopt_once(repo):
    ensure_excluded(repo)
    ensure_excluded(repo)
    lines = exclude_file(repo).read_text().splitlines()
    assert lines.count(EXCLUDE_LINE) == 1


def test_ensure_excluded_keeps_existing_lines(repo):
    exclude_file(repo).parent.mkdir(parents=True, exist_ok=True)
    exclude_file(repo).write_text("*.swp")  # no trailing newline
    ensure_excluded(repo)
    assert exclude_file(repo).read_text().splitlines() == ["*.swp", ".kopt/"]


def test_ensure_excluded_from_a_worktree_writes_the_shared_exclude(repo, tmp_path):
    ws = create_workspace(repo, tmp_path / "ws", "kernel-opt/t1")
    ensure_excluded(ws)
    assert EXCLUDE_LINE in exclude_file(repo).read_text().split()
    (tmp_path / "ws" / ".kopt").mkdir()
    (tmp_path / "ws" / ".kopt" / "state.json").write_text("{}")
    assert not ws.is_dirty(untracked_files=True)


# --- snapshot_tree ----------------------------------------------------------------------------------------


def test_snapshot_of_clean_tree_is_head_tree(ws):
    assert snapshot_tree(ws) == ws.head.commit.tree.hexsha


def test_snapshot_is_equal_for_identical_trees(ws):
    before = snapshot_tree(ws)
    k = wdir(ws) / "kernel.py"
    original = k.read_text()
    k.write_text("changed\n")
    k.write_text(original)
    assert snapshot_tree(ws) == before


def test_snapshot_changes_after_an_edit(ws):
    before = snapshot_tree(ws)
    (wdir(ws) / "kernel.py").write_text("def k():\n    return 2\n")
    assert snapshot_tree(ws) != before


def test_snapshot_includes_untracked_files(ws):
    before = snapshot_tree(ws)
    (wdir(ws) / "helper.py").write_text("x = 1\n")
    assert snapshot_tree(ws) != before


def test_snapshot_excludes_ignored_files(ws):
    before = snapshot_tree(ws)
    (wdir(ws) / "build").mkdir()
    (wdir(ws) / "build" / "out.txt").write_text("artifact")
    (wdir(ws) / "kernel.o").write_bytes(b"\x7fELF")
    (wdir(ws) / ".kopt").mkdir(exist_ok=True)
    (wdir(ws) / ".kopt" / "ledger.jsonl").write_text("{}\n")
    assert snapshot_tree(ws) == before


def test_snapshot_leaves_the_real_index_untouched(ws):
    (wdir(ws) / "helper.py").write_text("x = 1\n")
    (wdir(ws) / "kernel.py").write_text("edited\n")
    snapshot_tree(ws)
    assert sh(wdir(ws), "diff", "--cached", "--name-only") == ""
    assert "?? helper.py" in sh(wdir(ws), "status", "--porcelain")


# --- diff_against -----------------------------------------------------------------------------------------


def test_diff_of_clean_workspace_is_empty(ws):
    assert diff_against(ws, head_sha(ws)) == ("", [])


def test_diff_lists_changed_and_untracked_paths(ws):
    (wdir(ws) / "kernel.py").write_text("def k():\n    return 2\n")
    (wdir(ws) / "new_helper.py").write_text("y = 2\n")
    (wdir(ws) / "bench.py").unlink()
    patch, names = diff_against(ws, head_sha(ws))
    assert sorted(names) == ["bench.py", "kernel.py", "new_helper.py"]
    assert "+    return 2" in patch
    assert "new file mode" in patch and "+y = 2" in patch
    assert "deleted file mode" in patch


def test_diff_excludes_ignored_files(ws):
    (wdir(ws) / "kernel.o").write_bytes(b"\x7fELF")
    (wdir(ws) / ".kopt" / "x").parent.mkdir(exist_ok=True)
    (wdir(ws) / ".kopt" / "x").write_text("x")
    assert diff_against(ws, head_sha(ws)) == ("", [])


def test_diff_is_binary_safe_and_applies(ws, tmp_path):
    base = head_sha(ws)
    (wdir(ws) / "data.bin").write_bytes(bytes(range(256))[::-1] + b"\x00\xff")
    (wdir(ws) / "new.bin").write_bytes(b"\x00\x01\x02\xfe")
    patch, names = diff_against(ws, base)
    # a binary file BEST tracks is in the patch; a new untracked binary file is left out (see snapshot)
    assert sorted(names) == ["data.bin"]
    assert snapshot(ws, base).left_out == ["new.bin"]
    sh(wdir(ws), "add", "new.bin")  # tracked from now on, so the tree of `base` decides: still new there
    assert diff_against(ws, base)[1] == ["data.bin"]
    sh(wdir(ws), "commit", "-q", "-m", "track new.bin")
    patch, names = diff_against(ws, base)  # part of HEAD's history now, but still not tracked at base
    assert sorted(names) == ["data.bin"]
    sh(wdir(ws), "reset", "-q", "--soft", base)
    sh(wdir(ws), "reset", "-q")
    assert "GIT binary patch" in patch
    assert patch.endswith("\n")
    # applying the patch to a fresh checkout of the base gives the same tree
    clone = tmp_path / "clone"
    sh(tmp_path, "clone", "-q", str(wdir(ws)), str(clone))
    sh(clone, "checkout", "-q", base)
    (tmp_path / "p.patch").write_text(patch)
    sh(clone, "apply", "--binary", str(tmp_path / "p.patch"))
    assert (clone / "data.bin").read_bytes() == (wdir(ws) / "data.bin").read_bytes()
    assert not (clone / "new.bin").exists()


def test_diff_against_an_older_commit_includes_committed_changes(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("committed\n")
    commit_all(ws, "step")
    (wdir(ws) / "bench.py").write_text("edited\n")
    _, names = diff_against(ws, base)
    assert sorted(names) == ["bench.py", "kernel.py"]


@pytest.mark.parametrize("name", ["bänch.py", 'we"ird.py'])
def test_diff_lists_special_paths_unquoted(ws, name):
    (wdir(ws) / name).write_text("x\n")
    _, names = diff_against(ws, head_sha(ws))
    assert names == [name]


# --- reset_to -------------------------------------------------------------------------------------------


def test_reset_removes_edits_and_untracked_files(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("broken\n")
    (wdir(ws) / "scratch.py").write_text("tmp\n")
    (wdir(ws) / "newdir").mkdir()
    (wdir(ws) / "newdir" / "f.py").write_text("tmp\n")
    reset_to(ws, base)
    assert (wdir(ws) / "kernel.py").read_text() == "def k():\n    return 1\n"
    assert not (wdir(ws) / "scratch.py").exists()
    assert not (wdir(ws) / "newdir").exists()
    assert diff_against(ws, base) == ("", [])


def test_reset_keeps_ignored_kopt_content(ws):
    kopt = wdir(ws) / ".kopt"
    kopt.mkdir(exist_ok=True)
    (kopt / "state.json").write_text('{"phase": "ready"}')
    (wdir(ws) / "kernel.o").write_bytes(b"obj")
    reset_to(ws, head_sha(ws))
    assert (kopt / "state.json").read_text() == '{"phase": "ready"}'
    assert (wdir(ws) / "kernel.o").exists()


def test_reset_moves_back_to_an_older_commit(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    commit_all(ws, "v2")
    reset_to(ws, base)
    assert head_sha(ws) == base
    assert ws.active_branch.name == "kernel-opt/t1"


# --- commit_all ------------------------------------------------------------------------------------------


def test_commit_all_commits_tracked_and_untracked_but_not_ignored(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    (wdir(ws) / "performance.md").write_text("# performance.md\n")
    (wdir(ws) / "kernel.o").write_bytes(b"obj")
    (wdir(ws) / ".kopt").mkdir(exist_ok=True)
    (wdir(ws) / ".kopt" / "ledger.jsonl").write_text("{}\n")
    sha = commit_all(ws, "keep: v2")
    assert sha == head_sha(ws) != base
    files = set(sh(wdir(ws), "ls-tree", "-r", "--name-only", sha).split())
    assert {"kernel.py", "performance.md"} <= files
    assert "kernel.o" not in files and ".kopt/ledger.jsonl" not in files
    assert ws.head.commit.message.strip() == "keep: v2"
    assert not ws.is_dirty(untracked_files=True)


def test_commit_all_uses_the_configured_identity(ws):
    sh(wdir(ws), "config", "user.email", "dev@example.com")
    sh(wdir(ws), "config", "user.name", "Dev")
    (wdir(ws) / "kernel.py").write_text("v2\n")
    commit_all(ws, "v2")
    assert ws.head.commit.author.email == "dev@example.com"


def test_commit_all_works_without_any_git_identity(ws, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(git.GitCommandError):
        ws.git.config("user.email")  # really no identity
    (wdir(ws) / "kernel.py").write_text("v2\n")
    sha = commit_all(ws, "v2")
    assert sha == ws.head.commit.hexsha
    assert ws.head.commit.author.name == "kopt-mcp"
    assert ws.head.commit.committer.email == "kopt-mcp@localhost"


# --- ensure_best_worktree ---------------------------------------------------------------------------------


def test_best_worktree_is_detached_at_the_commit(repo, tmp_path):
    sha = repo.head.commit.hexsha
    best = ensure_best_worktree(repo, tmp_path / "best", sha)
    assert best.head.is_detached
    assert head_sha(best) == sha
    assert (tmp_path / "best" / "kernel.py").exists()


def test_best_worktree_follows_a_new_commit(repo, ws, tmp_path):
    first = head_sha(ws)
    best = ensure_best_worktree(repo, tmp_path / "best", first)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    second = commit_all(ws, "v2")
    best = ensure_best_worktree(repo, tmp_path / "best", second)
    assert head_sha(best) == second and best.head.is_detached
    assert (tmp_path / "best" / "kernel.py").read_text() == "v2\n"


def test_best_worktree_is_cleaned_when_dirty(repo, tmp_path):
    sha = repo.head.commit.hexsha
    ensure_best_worktree(repo, tmp_path / "best", sha)
    (tmp_path / "best" / "kernel.py").write_text("tampered\n")
    (tmp_path / "best" / "extra.py").write_text("x\n")
    best = ensure_best_worktree(repo, tmp_path / "best", sha)
    assert (tmp_path / "best" / "kernel.py").read_text() == "def k():\n    return 1\n"
    assert not (tmp_path / "best" / "extra.py").exists()
    assert not best.is_dirty(untracked_files=True)


def test_best_worktree_refuses_an_existing_plain_folder(repo, tmp_path):
    (tmp_path / "best").mkdir()
    with pytest.raises(VcsError, match="not a worktree"):
        ensure_best_worktree(repo, tmp_path / "best", repo.head.commit.hexsha)


# --- snapshot, export, verify, commit the snapshot -------------------------------------------------

from kopt_mcp.rules.protect import FileChange
from kopt_mcp.vcs import (
    commit_snapshot,
    export,
    file_at,
    freeze,
    run_changes,
    symlinks,
    tree_changes,
    tree_of,
)


def test_snapshot_keeps_outputs_as_they_are_in_base(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    (wdir(ws) / "bench.py").write_text("rewritten by the benchmark\n")
    (wdir(ws) / "new_out.txt").write_text("written by the benchmark\n")
    tree = snapshot(ws, base, keep_from_base=["bench.py", "new_out.txt"]).tree
    assert sorted(sh(wdir(ws), "diff", "--name-only", base, tree).split()) == ["kernel.py"]


def test_freeze_records_the_tree_on_a_hidden_ref_with_parent_base(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    tree = snapshot_tree(ws, base)
    sha = freeze(ws, tree, base, "refs/kopt/t1/attempts/0001", "attempt 1")
    assert sh(wdir(ws), "rev-parse", "refs/kopt/t1/attempts/0001").strip() == sha
    assert tree_of(ws, sha) == tree and sh(wdir(ws), "rev-parse", f"{sha}^").strip() == base
    assert head_sha(ws) == base and sh(wdir(ws), "branch", "--list").count("\n") == 2  # main + kernel-opt/t1


def test_export_is_a_plain_copy_with_links_and_modes_and_no_git(ws, tmp_path):
    (wdir(ws) / "run.sh").write_text("echo\n")
    (wdir(ws) / "run.sh").chmod(0o755)
    (wdir(ws) / "alias.py").symlink_to("kernel.py")
    (wdir(ws) / "sub").mkdir()
    (wdir(ws) / "sub" / "x.py").write_text("x\n")
    tree = snapshot_tree(ws)
    dest = tmp_path / "out" / "repo"
    export(ws, tree, dest)
    assert sorted(p.name for p in dest.iterdir()) == [".gitignore", "alias.py", "bench.py", "data.bin", "kernel.py",
                                                      "run.sh", "sub"]
    assert (dest / "alias.py").is_symlink() and (dest / "alias.py").readlink() == Path("kernel.py")
    assert (dest / "run.sh").stat().st_mode & 0o111 and (dest / "data.bin").read_bytes() == bytes(range(256))
    assert run_changes(ws, tree, dest) == []
    assert symlinks(ws, tree) == {"alias.py": "kernel.py"}
    with pytest.raises(FileExistsError):
        export(ws, tree, dest)


def test_run_changes_names_rewritten_deleted_and_new_files_but_not_ignored_or_artifacts(ws, tmp_path):
    tree = snapshot_tree(ws)
    dest = tmp_path / "co"
    export(ws, tree, dest)
    (dest / "bench.py").write_text("print('tampered')\n")
    (dest / "data.bin").unlink()
    (dest / "notes.txt").write_text("new\n")
    (dest / "build").mkdir()
    (dest / "build" / "x.txt").write_text("ignored\n")
    (dest / "__pycache__").mkdir()
    (dest / "__pycache__" / "k.pyc").write_bytes(b"\0")
    (dest / ".git").write_text("gitdir: /nowhere\n")  # a planted .git never redirects the check
    assert sorted(run_changes(ws, tree, dest)) == sorted([
        FileChange("rewrote", "bench.py"), FileChange("deleted", "data.bin"), FileChange("added", "notes.txt")])
    objects = sh(wdir(ws), "count-objects").split()[0]
    assert run_changes(ws, tree, dest) and sh(wdir(ws), "count-objects").split()[0] == objects  # writes no objects


def test_run_changes_sees_a_same_size_rewrite_with_its_old_timestamp_restored(ws, tmp_path):
    import os

    tree = snapshot_tree(ws)
    dest = tmp_path / "co"
    export(ws, tree, dest)
    st = (dest / "bench.py").stat()
    (dest / "bench.py").write_text("print('BENCH')\n")
    os.utime(dest / "bench.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run_changes(ws, tree, dest) == [FileChange("rewrote", "bench.py")]


def test_run_changes_sees_a_file_swapped_for_a_symlink(ws, tmp_path):
    tree = snapshot_tree(ws)
    dest = tmp_path / "co"
    export(ws, tree, dest)
    (dest / "bench.py").unlink()
    (dest / "bench.py").symlink_to("kernel.py")
    assert run_changes(ws, tree, dest) == [FileChange("rewrote", "bench.py")]


def test_tree_changes_and_file_at(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("v2\n")
    (wdir(ws) / "bench.py").unlink()
    (wdir(ws) / "n.py").write_text("n\n")
    tree = snapshot_tree(ws, base)
    assert tree_changes(ws, tree_of(ws, base), tree) == [
        FileChange("deleted", "bench.py"), FileChange("rewrote", "kernel.py"), FileChange("added", "n.py")]
    assert file_at(ws, base, "bench.py") == b"print('bench')\n" and file_at(ws, base, "nope.py") is None


def test_commit_snapshot_commits_the_tree_plus_files_never_the_working_tree(ws):
    base = head_sha(ws)
    (wdir(ws) / "kernel.py").write_text("tested\n")
    tree = snapshot_tree(ws, base)
    (wdir(ws) / "kernel.py").write_text("edited after the test\n")  # a post-run tree
    (wdir(ws) / "stray.py").write_text("never tested\n")
    sha = commit_snapshot(ws, tree, {"performance.md": b"| keep |\n"}, base, "keep")
    assert head_sha(ws) == sha and sh(wdir(ws), "rev-parse", f"{sha}^").strip() == base
    assert file_at(ws, sha, "kernel.py") == b"tested\n" and file_at(ws, sha, "performance.md") == b"| keep |\n"
    assert file_at(ws, sha, "stray.py") is None
    assert (wdir(ws) / "kernel.py").read_text() == "tested\n"  # the workspace is reset to the commit
    assert sh(wdir(ws), "status", "--porcelain") == "?? stray.py\n"  # untracked files stay


def test_run_changes_makes_what_the_run_locked_readable_again_and_still_sees_it(ws, tmp_path):
    tree = snapshot_tree(ws)
    dest = tmp_path / "co"
    export(ws, tree, dest)
    (dest / "sub").mkdir()
    (dest / "sub" / "hidden.txt").write_text("x\n")
    (dest / "bench.py").write_text("print('tampered')\n")
    (dest / "bench.py").chmod(0)
    (dest / "sub").chmod(0)
    changes = run_changes(ws, tree, dest)
    assert (dest / "bench.py").stat().st_mode & 0o600 == 0o600 and (dest / "sub").stat().st_mode & 0o700 == 0o700
    assert sorted(changes) == [FileChange("added", "sub/hidden.txt"), FileChange("rewrote", "bench.py")]

