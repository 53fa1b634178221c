"""examples/ and the install paths, run as a user would copy them, offline.

* hfvram is installed from a copy of this checkout into a fresh virtual environment (as `pip install
  "git+URL@tag"` would, without the download): pip builds without isolation and without an index, so no network
  is needed, and the environment finds the dependencies where the interpreter running the tests has them
  (`dependency_dir`: its site-packages less hfvram itself and the packaging tools), whether that interpreter is
  the system's or a virtual environment's (as in CI, where the README's commands run in a new venv).
* examples/github-actions.yml: its `run:` steps are executed by bash in a fresh folder, against the local test
  Hub, with that environment's `hfvram` on PATH in place of the install step.
* examples/pre-commit-hook.yaml: copied into a fresh git repository as .pre-commit-config.yaml, pointing at a
  git copy of this checkout instead of the public URL; the real `pre-commit` builds its own environment from
  the repository's .pre-commit-hooks.yaml and runs the hook.
* the Hugging Face CLI: `hf vram …` runs the `hf-vram` console script of an installed extension.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cli_support import LLAMA_FOLDER, ROOT, run_hfvram, validate

EXAMPLES = ROOT / "examples"
#: the repository URL the examples and the README install from, as pyproject.toml's [project.urls] names it
TAG = "v0.1.0"
#: what a package needs to build: the project files and the package, nothing else of the checkout
PACKAGE_FILES = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "hfvram")
OFFLINE_PIP = {
    "PIP_NO_INDEX": "1",
    "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling for --no-build-isolation
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "VIRTUALENV_SYSTEM_SITE_PACKAGES": "1",
    "VIRTUALENV_SETUPTOOLS": "bundle",  # virtualenv seeds no setuptools for Python >= 3.12 by default
}

pytestmark = pytest.mark.slow


def repository_url() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def copy_checkout(target: Path) -> Path:
    target.mkdir(parents=True)
    for name in PACKAGE_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target / name)
    return target


def dependency_dir(target: Path) -> Path:
    """A folder of links to what the running interpreter has installed, less hfvram and the packaging tools.

    A virtual environment made from a venv's interpreter sees the base interpreter's packages, not the venv's
    (virtualenv and venv both resolve to the base), so the environments these tests build are pointed here
    instead: each finds hfvram's dependencies as the test run has them, and its own hfvram and pip first.
    """
    import sysconfig

    skip = ("hfvram", "__editable__", "pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack", "distutils")
    target.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for key in ("purelib", "platlib"):
        site = Path(sysconfig.get_paths()[key])
        if not site.is_dir():
            continue
        for entry in sorted(site.iterdir()):
            name = entry.name
            # .pth files would run in the new environment (an editable hfvram's finder among them)
            if name in seen or name.endswith(".pth") or name.lower().replace("-", "_").startswith(skip):
                continue
            seen.add(name)
            (target / name).symlink_to(entry)
    return target


def site_packages(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Path(done.stdout.strip())


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=hfvram tests", "-c", "user.email=tests@hfvram.invalid", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A virtual environment with hfvram installed from a copy of this checkout (its bin/ holds the scripts)."""
    pytest.importorskip("virtualenv")
    base = tmp_path_factory.mktemp("install")
    source = copy_checkout(base / "hfvram")
    env_dir = base / "env"
    environ = {**os.environ, **OFFLINE_PIP}
    subprocess.run([sys.executable, "-m", "virtualenv", "-q", str(env_dir)], check=True, env=environ, timeout=120)
    python = env_dir / "bin" / "python"
    # after the environment's own site-packages: its hfvram and pip come first
    (site_packages(python) / "hfvram-test-dependencies.pth").write_text(f"{dependency_dir(base / 'deps')}\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(source)],
        check=True,
        env=environ,
        timeout=180,
    )
    return env_dir


def test_install_exposes_both_console_scripts(installed):
    for script in ("hfvram", "hf-vram"):
        done = subprocess.run(
            [str(installed / "bin" / script), "--version"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "hfvram, version 0.1.0"


def test_docs_and_examples_never_install_from_an_index():
    """No index serves hfvram: every install line names the repository (or a path)."""
    url = repository_url()
    assert url.startswith("https://github.com/")
    for path in [ROOT / "README.md", *EXAMPLES.iterdir()]:
        text = path.read_text()
        assert "pip install hfvram" not in text, path
        assert '"hfvram"]' not in text, path  # additional_dependencies: ["hfvram"]
    action = (EXAMPLES / "github-actions.yml").read_text()
    assert f'pip install "git+{url}@{TAG}"' in action
    readme = (ROOT / "README.md").read_text()
    assert f'pip install "git+{url}@' in readme
    assert "pipx install /path/to/hfvram" in readme and "uv tool install /path/to/hfvram" in readme


# ---- the GitHub Action ---------------------------------------------------------------------------------------


def action_steps() -> list[dict]:
    import yaml

    workflow = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    return workflow["jobs"]["fits"]["steps"]


def run_step(step: dict, cwd: Path, environ: dict) -> subprocess.CompletedProcess:
    """A `run:` step as GitHub's ubuntu runner runs it by default (bash -e); secrets are unset (empty)."""
    env = {**environ, **{name: "" for name in step.get("env", {})}}
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def test_action_steps_run(installed, hub, tmp_path):
    steps = [step for step in action_steps() if "run" in step]
    install, scan, summary = steps
    assert install["run"] == f'pip install "git+{repository_url()}@{TAG}"'
    work = tmp_path / "project"
    work.mkdir()
    environ = {**os.environ, "PATH": f"{installed / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    environ["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    assert shutil.which("hfvram", path=environ["PATH"]) == str(installed / "bin" / "hfvram")

    (work / "models.txt").write_text("# deployed models\nQwen/Qwen3-8B\nmeta-llama/Llama-3.1-8B-Instruct\n")
    done = run_step(scan, work, environ)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in (work / "hfvram.jsonl").read_text().splitlines()]
    # JSON Lines come as each source finishes (README, scan): the order is not the list's
    assert sorted(row["source"]["repo_id"] for row in rows) == ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"]
    for row in rows:
        validate(row)
        assert row["verdict"] == "fits" and row["hardware"]["gpu"] == "h100-sxm"
    assert run_step(summary, work, environ).returncode == 0
    assert "Qwen/Qwen3-8B" in (tmp_path / "summary.md").read_text()

    # a 72B model in bf16 does not fit one H100: the job fails (pipefail through tee), the summary still comes
    (work / "models.txt").write_text("Qwen/Qwen3-8B\nQwen/Qwen2.5-72B\n")
    done = run_step(scan, work, environ)
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = {json.loads(line)["source"]["repo_id"]: json.loads(line)["verdict"] for line in done.stdout.splitlines()}
    assert verdicts == {"Qwen/Qwen3-8B": "fits", "Qwen/Qwen2.5-72B": "does_not_fit"}
    assert run_step(summary, work, environ).returncode == 0
    assert "Qwen/Qwen2.5-72B" in (tmp_path / "summary.md").read_text()


# ---- pre-commit ----------------------------------------------------------------------------------------------


def test_pre_commit_example_in_a_fresh_repository(tmp_path):
    pytest.importorskip("pre_commit")
    hfvram_repo = copy_checkout(tmp_path / "hfvram")
    git("init", "-q", cwd=hfvram_repo)
    git("add", ".", cwd=hfvram_repo)
    git("commit", "-q", "-m", "hfvram", cwd=hfvram_repo)
    revision = git("rev-parse", "HEAD", cwd=hfvram_repo)

    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", cwd=project)
    example = (EXAMPLES / "pre-commit-hook.yaml").read_text()
    url = repository_url()
    assert f"repo: {url}" in example and f"rev: {TAG}" in example
    config = example.replace(f"repo: {url}", f"repo: {hfvram_repo}").replace(f"rev: {TAG}", f"rev: {revision}")
    (project / ".pre-commit-config.yaml").write_text(config)
    (project / "models.txt").write_text("meta-llama/Llama-3.1-8B-Instruct\n")
    git("add", ".", cwd=project)

    environ = {**os.environ, **OFFLINE_PIP, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    environ["HF_HUB_OFFLINE"] = "1"
    # pre-commit's own environment (built by virtualenv from the base interpreter) finds the dependencies here;
    # pip counts what is on the path as installed, so `pip install .` of the hook repository needs no index
    deps = dependency_dir(tmp_path / "deps")
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(deps), environ.get("PYTHONPATH", "")]))

    def pre_commit() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"]
        return subprocess.run(command, cwd=project, env=environ, capture_output=True, text=True, timeout=300)

    done = pre_commit()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hfvram — models still fit the deployment GPU" in done.stdout and "Passed" in done.stdout
    # pre-commit built its environment from the hook repository: the package and both scripts are there
    scripts = sorted(path.name for path in (tmp_path / "pre-commit-home").glob("repo*/py_env-*/bin/h*"))
    assert scripts == ["hf-vram", "hfvram"]

    (project / "models.txt").write_text("meta-llama/Llama-3.1-8B-Instruct\nmeta-llama/Llama-3.1-70B-Instruct\n")
    git("add", ".", cwd=project)
    done = pre_commit()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Failed" in done.stdout and "meta-llama/Llama-3.1-70B-Instruct" in done.stdout


# ---- the Hugging Face CLI extension --------------------------------------------------------------------------


def test_hf_extension_names_and_no_shell_script_shadow():
    """`hf extensions install OWNER/hf-vram` accepts only repositories named hf-<name>, and installs a file named
    hf-vram at the repository's root as a shell script instead of the Python package: there is none here."""
    from huggingface_hub.cli.extensions import _normalize_repo_id

    assert _normalize_repo_id("someone/hf-vram") == ("someone", "hf-vram", "vram")
    assert not (ROOT / "hf-vram").exists()


def test_hf_cli_runs_the_hf_vram_script(installed, tmp_path):
    """What `hf extensions install` leaves (a manifest naming the venv's hf-vram script), then `hf vram check …`
    through the real `hf` CLI: the same document as `hfvram check`."""
    from huggingface_hub.cli.extensions import ExtensionManifest

    home = tmp_path / "home"
    ExtensionManifest(
        owner="someone",
        repo="hf-vram",
        repo_id="someone/hf-vram",
        short_name="vram",
        executable_path=str(installed / "bin" / "hf-vram"),
        type="python",
        installed_at=datetime.now(timezone.utc),
    ).save(home / ".local" / "share" / "hf" / "extensions" / "hf-vram")
    environ = {**os.environ, "HOME": str(home), "HF_HUB_DISABLE_UPDATE_CHECK": "1"}
    args = ["check", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k", "--json"]
    command = [sys.executable, "-c", "from huggingface_hub.cli.hf import main; main()", "vram", *args]
    done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout) == json.loads(run_hfvram(*args).stdout)
