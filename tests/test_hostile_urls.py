"""Ids and revisions before any URL (issue 27): a revision with ``/`` reaches the Hub as one encoded path segment
(``refs/pr/1`` as ``refs%2Fpr%2F1``, as huggingface_hub's own ``hf_hub_url`` / ``HfApi.model_info`` send it), and no
id, revision or listed file name makes a request to another endpoint of the (test) Hub."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hfvram.cli import cli

SOURCE = "sentence-transformers/all-MiniLM-L6-v2"
runner = CliRunner()


@pytest.mark.parametrize("how", ["@", "--revision"])
def test_a_revision_with_slashes_is_one_encoded_segment(hub, how):
    hub.branches.add("refs/pr/1")
    args = [f"{SOURCE}@refs/pr/1"] if how == "@" else [SOURCE, "--revision", "refs/pr/1"]
    result = runner.invoke(cli, ["check", *args, "--gpu", "h100", "--json"])
    assert result.exit_code in (0, 1), result.output[:300]
    raw = [record.raw_path for record in hub.records if not record.raw_path.startswith("/cdn/")]
    assert raw and all(path.startswith((f"/api/models/{SOURCE}", f"/{SOURCE}/resolve/")) for path in raw), raw
    at_revision = [path for path in raw if "/revision/" in path or "/resolve/" in path]
    assert any("refs%2Fpr%2F1" in path for path in at_revision), raw
    assert not any("refs/pr/1" in path for path in raw), raw


def test_a_revision_the_hub_lacks_is_a_read_error_at_its_own_url(hub):
    result = runner.invoke(cli, ["check", f"{SOURCE}@refs/pr/9", "--gpu", "h100"])
    assert result.exit_code == 3 and result.output.count("\n") == 1, result.output[:300]
    raw = [r.raw_path for r in hub.records if not r.raw_path.startswith("/cdn/")]
    assert raw and all("refs%2Fpr%2F9" in path for path in raw), raw  # every request names it, encoded
    assert all(path.startswith((f"/api/models/{SOURCE}/", f"/{SOURCE}/resolve/")) for path in raw), raw


@pytest.mark.parametrize(
    "source", ["evil/x.git", "evil/..", "evil/x%2F..", "evil/x/y", "evil/x?y", "evil/x#y", "evil/x@refs/../main"]
)
def test_ids_that_would_name_another_url_never_reach_the_hub(hub, source):
    result = runner.invoke(cli, ["check", source, "--gpu", "h100"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output[:300]
    assert hub.request_count == 0


def test_the_url_builders_check_what_they_are_given():
    """The builders themselves refuse (for callers past parse_source: listings, the API): a bad id or revision is
    a usage error, a listed file name with a dot segment a read error."""
    from hfvram.errors import MalformedFileError, UsageError
    from hfvram.sources import hub as hub_module

    for call in (
        lambda: hub_module.model_api_url("evil/.."),
        lambda: hub_module.model_api_url(SOURCE, "revision", ".."),
        lambda: hub_module.file_url("evil/..", "main", "config.json"),
    ):
        with pytest.raises(UsageError):
            call()
    with pytest.raises(MalformedFileError):
        hub_module.file_url(SOURCE, "main", "../../api/models")
    assert hub_module.model_api_url(SOURCE, "revision", "refs/pr/1").endswith("/revision/refs%2Fpr%2F1")


def test_a_listed_file_with_dot_segments_is_not_requested(hub):
    """A hostile model info lists a GGUF file ``q/../../../../api/models/x-Q4_K_M.gguf``: never requested (the path
    would resolve to another URL of the Hub), one read error."""
    from hubserver import Fault

    hub.faults[f"/api/models/{SOURCE}"] = Fault("listing", files=("q/../../../../api/models/x-Q4_K_M.gguf",))
    result = runner.invoke(cli, ["check", f"{SOURCE}:Q4_K_M", "--gpu", "h100"])
    assert result.exit_code == 3 and result.output.count("\n") == 1, result.output[:300]
    paths = [record.path for record in hub.records]
    assert paths and all(path.startswith((f"/api/models/{SOURCE}", f"/{SOURCE}/resolve/")) for path in paths), paths
