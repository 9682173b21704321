"""The installed distributions carry gsp's index names: `gevent-sp` and `gevent-sp-*` (the name
`gsp` on the package index is an unrelated project), while the import names stay `gsp`, `gsp_*`
and the entry-point group stays `gsp`."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re

import pytest

import gsp

pytestmark = pytest.mark.plugins

#: distribution -> the top-level packages it installs
DISTRIBUTIONS = {
    "gevent-sp": {"gsp"},
    "gevent-sp-star": {"gsp_star"},
    "gevent-sp-ws": {"gsp_ws"},
    "gevent-sp-spark": {"gsp_spark", "pyspark_gsp"},
    "gevent-sp-bench": {"gsp_bench"},
    "gevent-sp-example-zlib": {"gsp_example_zlib"},
    "gevent-sp-example-gather": {"gsp_example_gather"},
}


def _requirement_names(dist: str) -> dict[str, str]:
    """requirement name -> its marker ("" if none), from the installed metadata."""
    out = {}
    for req in md.distribution(dist).requires or []:
        name = re.match(r"[A-Za-z0-9._-]+", req)
        assert name is not None, req
        out[name.group(0).lower()] = req.partition(";")[2].strip()
    return out


def test_version_is_the_distributions() -> None:
    assert gsp.__version__ == md.version("gevent-sp")


def test_each_package_comes_from_its_new_named_distribution() -> None:
    owners = md.packages_distributions()
    for dist, packages in DISTRIBUTIONS.items():
        assert md.distribution(dist).metadata["Name"] == dist
        for package in packages:
            assert set(owners[package]) == {dist}, (package, owners[package])


def test_plugins_depend_on_gevent_sp_and_nothing_on_gsp() -> None:
    for dist in DISTRIBUTIONS:
        reqs = _requirement_names(dist)
        assert "gsp" not in reqs, f"{dist} still depends on the index's unrelated 'gsp'"
        if dist != "gevent-sp":
            assert "gevent-sp" in reqs and reqs["gevent-sp"] == "", (dist, reqs)
    extras = _requirement_names("gevent-sp")
    assert extras["gevent-sp-spark"] == 'extra == "spark"'
    assert extras["gevent-sp-bench"] == 'extra == "bench"'


def test_entry_points_keep_the_gsp_group_under_the_new_names() -> None:
    by_dist: dict[str, set[str]] = {}
    for ep in md.entry_points(group="gsp"):
        assert ep.dist is not None
        by_dist.setdefault(ep.dist.name, set()).add(ep.name)
    assert by_dist["gevent-sp"] == {"tcp", "ipc", "inproc", "tls", "socketfd", "udp", "pair", "pushpull",
                                    "pubsub", "bus", "pair1", "reqrep", "survey"}
    assert by_dist["gevent-sp-star"] == {"star"}
    assert by_dist["gevent-sp-ws"] == {"ws"}
    assert not {"gsp", "gsp-star", "gsp-ws"} & set(by_dist)
    # The console script and the pytest plugin still come from gevent-sp, under the name gsp.
    scripts = [ep for ep in md.entry_points(group="console_scripts") if ep.name == "gsp"]
    assert [(ep.dist.name if ep.dist else None, ep.value) for ep in scripts] == [
        ("gevent-sp", "gsp.__main__:main")]
    pytest_plugins = [ep for ep in md.entry_points(group="pytest11") if ep.value == "gsp.testing.plugin"]
    assert [ep.dist.name if ep.dist else None for ep in pytest_plugins] == ["gevent-sp"]


def test_gsp_bench_is_a_command_the_bench_distribution_adds() -> None:
    """``gsp bench`` reaches gsp's command line through the ``gsp.commands`` entry-point group,
    from gevent-sp-bench: the runtime package holds no benchmark."""
    commands = {ep.name: (ep.dist.name if ep.dist else None, ep.value)
                for ep in md.entry_points(group="gsp.commands")}
    assert commands["bench"] == ("gevent-sp-bench", "gsp_bench.cli:main")
    assert importlib.util.find_spec("gsp.bench") is None
    assert importlib.util.find_spec("gsp._core.docs") is None
