"""What each rpc-server brings (``--rpc-device HOST:PORT=SPEC``), and the devices the planner
makes of ``--rpc`` in llama.cpp's order and names (llamarig.plan.rpc)."""

from __future__ import annotations

import pytest

from llamarig.errors import InputError
from llamarig.plan.fit.fit_log import parse_fit_log
from llamarig.plan.inputs import build_plan
from llamarig.plan.rpc import parse_rpc_device, split_endpoint
from llamarig.testing.plans import deployment_of
from llamarig.units import GiB, MiB


def test_a_size_is_the_servers_cpu_device():
    (g,) = parse_rpc_device("192.168.1.20:50052=64G")
    assert (g.backend, g.remote_backend, g.endpoint, g.memory_bytes) == ("RPC", "CPU", "192.168.1.20:50052", 64 * GiB)
    assert g.buffer_backend == "CPU"
    assert parse_rpc_device("h:1=cpu:512MiB")[0].memory_bytes == 512 * MiB


def test_a_gpu_name_is_a_cuda_device_behind_the_server():
    g, h = parse_rpc_device("box:50052=rtx3090,rtx3090:20")
    assert g.remote_backend == "CUDA" and g.buffer_backend == "CUDA" and g.memory_bytes == 24 * GiB
    assert h.memory_bytes == 20 * GiB and h.endpoint == "box:50052"


@pytest.mark.parametrize("text", ["box:50052", "box=24G", "box:x=24G", "box:50052=", "box:50052=cpu",
                                  "box:50052=0G", ":50052=24G", "box:70000=24G"])
def test_bad_descriptions_are_one_line(text):
    with pytest.raises(InputError) as e:
        parse_rpc_device(text)
    assert "\n" not in str(e.value)


def test_split_endpoint():
    assert split_endpoint("10.0.0.2:50052") == ("10.0.0.2", 50052)


def _plan(rpc: str, described: list[str], *flags: str):
    return build_plan(deployment_of("qwen3-8b:q4_k_m", ["--rpc", rpc, "-c", "8192", *flags], rpc_devices=described))


def test_devices_come_first_named_as_their_buffers():
    """llama-server's buffer lines name each device RPC<index on its server>[HOST:PORT]."""
    p = _plan("a:1,b:2", ["a:1=16G", "b:2=rtx3090"], "-fit", "off")
    assert [d.name for d in p.devices] == ["RPC0[a:1]", "RPC0[b:2]"]
    assert [d.capacity for d in p.devices] == [16 * GiB, 24 * GiB]
    # the default split follows the memory each server offers (16 : 24)
    assert p.devices[0].get("weights") < p.devices[1].get("weights")


def test_two_devices_on_one_server():
    p = _plan("a:1", ["a:1=8G,8G"], "-fit", "off")
    assert [d.name for d in p.devices] == ["RPC0[a:1]", "RPC1[a:1]"]


def test_dev_takes_the_ggml_device_names_and_sm_none_the_whole_list():
    p = _plan("a:1,b:2", ["a:1=16G", "b:2=16G"], "-dev", "RPC1", "-fit", "off")
    assert [d.name for d in p.devices] == ["RPC0[b:2]"]
    p = _plan("a:1,b:2", ["a:1=16G", "b:2=16G"], "-sm", "none", "-mg", "1", "-fit", "off")
    assert [d.name for d in p.devices] == ["RPC0[b:2]"]


def test_undescribed_servers_get_a_note_and_no_capacity():
    p = _plan("a:1,b:2", ["a:1=16G"], "-fit", "off")
    assert p.devices[1].capacity is None
    assert any("b:2" in n and "--rpc-device" in n for n in p.notes)


def test_a_description_not_in_rpc_is_refused():
    with pytest.raises(InputError, match="not in --rpc"):
        _plan("a:1", ["a:1=16G", "c:3=16G"])


def test_fit_moves_layers_off_a_small_server():
    p = _plan("a:1,b:2", ["a:1=3G", "b:2=2G"], "-fitt", "256")
    assert p.effective_cfg is not None and p.effective_cfg.n_gpu_layers < 37
    assert p.fits


FIT_TRACE = """\
0.00.097.508 I common_params_fit_impl:   - RPC0 (127.0.0.1:53419):    200 total,    233 used,    -33 free vs. target of     32
0.00.097.509 I common_params_fit_impl:   - RPC1 (127.0.0.1:36415):    150 total,    133 used,     16 free vs. target of     32
0.00.145.952 I common_params_fit_impl: context size reduced from 16384 to 10496 -> need 92 MiB less memory in total
0.00.172.157 I common_params_fit_impl: memory for test allocation by device:
0.00.172.166 I common_params_fit_impl: id=0, n_layer= 0, n_part= 0, overflow_type=4, mem=     0 MiB
0.00.172.171 I common_params_fit_impl: id=1, n_layer= 9, n_part= 0, overflow_type=4, mem=   211 MiB
0.00.274.382 I common_params_fit_impl:   - RPC1 (127.0.0.1:36415):  6 layers,    113 MiB used,     36 MiB free
0.00.280.729 I common_params_fit_impl:   - RPC0 (127.0.0.1:53419):  3 layers,    122 MiB used,     77 MiB free
0.00.284.270 I load_tensors: offloaded 9/9 layers to GPU
0.00.344.660 I llama_context: n_ctx                 = 10496
"""


def test_fit_log_reads_the_trace():
    fl = parse_fit_log(FIT_TRACE)
    assert fl.ctx_to == 10496 and fl.n_ctx == 10496 and fl.offloaded == (9, 9)
    assert fl.layers() == (3, 6)
    assert [d.description for d in fl.devices] == ["127.0.0.1:53419", "127.0.0.1:36415"]
    assert fl.devices[0].used_mib == 233 and fl.devices[1].target_mib == 32
    assert fl.trials[0].layers == ((0, 0, 4), (9, 0, 4)) and fl.trials[0].mem_mib == (0, 211)


def _mixed(*flags: str, gpus: tuple[str, ...] = ("rtx3090", "rtx4090")):
    """Two rpc-servers beside two local CUDA GPUs."""
    return build_plan(deployment_of("qwen3-8b:q4_k_m", ["--rpc", "a:1,b:2", "-c", "8192", "-fit", "off", *flags],
                                    gpus=list(gpus), rpc_devices=["a:1=16G", "b:2=16G"]))


def test_rpc_servers_come_before_local_gpus():
    """The model's devices: RPC servers first, then the local GPUs (src/llama.cpp:275-279)."""
    assert [d.name for d in _mixed().devices] == ["RPC0[a:1]", "RPC0[b:2]", "CUDA0", "CUDA1"]


@pytest.mark.parametrize(("mg", "name"), [("0", "RPC0[a:1]"), ("1", "RPC0[b:2]"), ("2", "CUDA0"), ("3", "CUDA1")])
def test_sm_none_picks_the_main_gpu_of_the_whole_list(mg, name):
    """-sm none keeps device -mg of that list, RPC servers included (src/llama.cpp:288-301)."""
    p = _mixed("-sm", "none", "-mg", mg)
    assert [d.name for d in p.devices] == [name]
    assert p.devices[0].get("weights") > 0


def test_sm_none_with_a_negative_main_gpu_runs_on_the_cpu():
    """A negative -mg clears the list (src/llama.cpp:289-290): every layer on the CPU."""
    p = _mixed("-sm", "none", "-mg", "-1")
    assert p.devices == () and p.host.get("weights") > 0


def test_dev_keeps_its_own_order_over_rpc_and_local():
    """-dev names the devices in the order given (common/arg.cpp parse_device_list; src/llama.cpp:
    160-183): the RPC-first order no longer applies, and -sm none indexes that list."""
    p = _mixed("-dev", "CUDA1,RPC0")
    assert [d.name for d in p.devices] == ["CUDA1", "RPC0[a:1]"]
    assert [d.name for d in _mixed("-dev", "CUDA1,RPC0", "-sm", "none", "-mg", "1").devices] == ["RPC0[a:1]"]


def test_sm_none_main_gpu_past_the_list_is_refused():
    with pytest.raises(InputError, match="-mg 4"):
        _mixed("-sm", "none", "-mg", "4")
