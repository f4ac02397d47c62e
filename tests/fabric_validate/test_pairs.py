"""The pair test's pure part: pairing, perftest's real output read, and the judgement against thresholds."""

from __future__ import annotations

import json

import pytest

from gpuforge.probes.nccl_tests import parse_nccl
from gpuforge.validator import fabric_pairs as fp
from tests.fabric_validate.helpers import text
from tests.validator.vhelpers import REPO


@pytest.mark.parametrize(
    ("nodes", "pairs", "rounds"),
    [
        (["a"], [], 0),
        (["a", "b"], [("a", "b")], 1),
        (["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")], 3),
        (["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")], 2),
        (list("abcde"), [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a")], 3),
    ],
)
def test_a_ring_in_rounds_where_no_node_is_twice(nodes: list[str], pairs: list[tuple[str, str]], rounds: int) -> None:
    assert fp.ring(nodes) == pairs
    planned = fp.rounds(pairs)
    assert len(planned) == rounds and sorted(p for r in planned for p in r) == sorted(pairs)
    for r in planned:
        used = [n for pair in r for n in pair]
        assert len(used) == len(set(used))


@pytest.mark.parametrize(
    ("name", "gbps"),
    [("write_bw_duration_gbits_issue273.txt", 0.48), ("write_bw_rxe_client.txt", 0.10),
     ("write_bw_duration_rdma_cm_bnxt.txt", 363.47)],
)  # fmt: skip
def test_write_bw_average_from_real_output(name: str, gbps: float) -> None:
    assert fp.parse_write_bw(text(name).splitlines()) == gbps


def test_read_lat_typical_from_real_output_and_none_from_the_server_side() -> None:
    assert fp.parse_read_lat(text("read_lat_rxe_client.txt").splitlines()) == 302.23
    assert fp.parse_read_lat(text("read_lat_rxe_server.txt").splitlines()) is None
    assert fp.parse_write_bw(text("read_lat_rxe_client.txt").splitlines()) is None


def sections(write: str, write_rc: int, lat: str, lat_rc: int) -> str:
    return f"__section=write_bw\n{write}\n__rc={write_rc}\n__tries=2\n__section=read_lat\n{lat}\n__rc={lat_rc}\n"


def test_judge_passes_within_thresholds_and_names_what_is_off() -> None:
    client = sections(text("write_bw_duration_rdma_cm_bnxt.txt"), 0, text("read_lat_rxe_client.txt"), 0)
    server = sections("", 0, text("read_lat_rxe_server.txt"), 0)
    ok = fp.PairResult("n1", "n2")
    fp.judge_perftest(ok, client, server, {"write_bw_gbps": 300.0, "read_lat_us": 400.0})
    assert (ok.write_gbps, ok.read_lat_us, ok.problems) == (363.47, 302.23, [])
    assert fp.describe(ok) == "n1->n2: write 363.47 Gb/s, read lat 302.23 us"
    slow = fp.PairResult("n1", "n2")
    fp.judge_perftest(slow, client, server, {"write_bw_gbps": 400.0, "read_lat_us": 100.0})
    assert slow.problems == ["ib_write_bw 363.47 Gb/s, below the spec's 400",
                             "ib_read_lat t_typical 302.23 us, above the spec's 100"]  # fmt: skip


def test_a_server_that_never_listened_is_named() -> None:
    client = sections("Couldn't connect to 10.0.0.1:18515\n Unable to set up socket connection", 1, "", 124)
    got = fp.PairResult("n1", "n2")
    fp.judge_perftest(got, client, sections(" Unable to find the Infiniband/RoCE device", 1, "", 124), {})
    assert got.problems[0].startswith("ib_write_bw the server was not reached: Couldn't connect to 10.0.0.1:18515")
    assert "(server exit 1:  Unable to find the Infiniband/RoCE device" not in got.problems[0]
    assert "server exit 1: Unable to find the Infiniband/RoCE device" in got.problems[0]
    assert got.problems[1].startswith("ib_read_lat exit 124: no output")


def test_a_failed_run_is_named_by_its_error_line_not_the_table_header_flushed_after_it() -> None:
    """perftest's stderr comes at once, its stdout at exit: the error line precedes the header."""
    failed = (
        " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"
        "---------------------------------------------------------------------------------------\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    )
    got = fp.PairResult("n1", "n2")
    server_out = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    fp.judge_perftest(got, sections(failed, 1, "", 124), sections(server_out, 1, "", 124), {})
    assert got.problems[0] == (
        "ib_write_bw exit 1: Completion with error at client | Failed status 12: wr_id 0 syndrom 0x81 "
        "(server exit 1: #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps])"
    )


def test_commands_carry_only_checked_tokens() -> None:
    server = fp.endpoint("n1", "n1", {"rxe_eth1": {"port": 1, "gid_index": 1, "ipv4": "10.0.0.1"}})
    client = fp.endpoint("n2", "n2", {"mlx5_0": {"port": 2, "gid_index": 3, "ipv4": None}})
    assert server is not None and client is not None
    assert client.address == "n2" and server.address == "10.0.0.1"
    assert fp.endpoint("n3", "n3", {"mlx5_0;reboot": {"port": 1}}) is None
    script = fp.client_script(client, server, 5, 20)
    assert "try_client timeout 35 ib_write_bw -d mlx5_0 -i 2 -x 3 -F --report_gbits -D 5 10.0.0.1" in script
    assert "try_client timeout 30 ib_read_lat -d mlx5_0 -i 2 -x 3 -F 10.0.0.1" in script
    assert "timeout 95 ib_write_bw -d rxe_eth1 -i 1 -x 1 -F --report_gbits -D 5 2>&1" in fp.server_script(server)
    assert fp.nccl_command("gpu001", "gpu002", 8, "gpu") == (
        "timeout 300 srun -N2 -w gpu001,gpu002 -p gpu --ntasks-per-node=8 --gres=gpu:8 --mpi=pmix "
        "-J gpuforge-validate /opt/nccl-tests/current/build/all_reduce_perf -b 8 -e 1G -f 2 -g 1 2>&1; "
        'echo "__rc=$?"'
    )


def test_nccl_table_is_the_acceptance_parser_s() -> None:
    from gpuforge.acceptance import parsers

    recorded = json.loads((REPO / "tests/acceptance/fixtures/nccl_2node_16gpu.json").read_text())["stdout"]
    assert parsers.parse_nccl is parse_nccl
    assert parse_nccl(recorded)["largest"]["busbw"] == 338.82


def test_the_pair_scripts_real_output_between_two_soft_roce_vms() -> None:
    """Recorded on the lab's two Debian 12 VMs (qemu TCG, rxe_eth1 each): the server and client scripts
    of this module, run verbatim over SSH; what the judge reads from them."""
    client = fp.split_sections(text("pair_client_rxe_vms.txt"))
    server = fp.split_sections(text("pair_server_rxe_vms.txt"))
    assert {k: v[0] for k, v in client.items()} == {fp.WRITE_BW: 0, fp.READ_LAT: 0}
    assert {k: v[0] for k, v in server.items()} == {fp.WRITE_BW: 0, fp.READ_LAT: 0}
    assert fp.parse_write_bw(client[fp.WRITE_BW][1]) == pytest.approx(0.054499)
    assert fp.parse_read_lat(client[fp.READ_LAT][1]) == pytest.approx(558.07)


def test_the_client_waits_longer_than_the_server_s_session_may_take_to_start() -> None:
    """The server's session may need the transport's two SSH tries (each up to ConnectTimeout, the second
    a second after the first) before perftest listens: the client's window is longer than both."""
    from gpuforge.validator import runner

    assert fp.CONNECT_WINDOW_S > 2 * runner.SSH_CONNECT_TIMEOUT_S + 1 + 10  # + sudo and perftest's start
