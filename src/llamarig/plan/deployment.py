"""A ``Deployment``: one llama-server deployment as a value, built once where the user's input
is read (the CLI, or a library caller) and handed to every use case (plan, render, launch,
tune): the model it serves, its command parsed once against the flag schema, the settings the
planner reads of that command, and the hardware it runs on.

Inputs are typed here: GPUs are ``GPU`` values (``catalogue.gpus.find_gpu``), sizes are bytes.
Reading what a person types ("rtx3090:24", "64G", "avx2,fma") happens at the edge, where the
input is read, before a Deployment is built (``catalogue.gpus.read_gpu_args``,
``units.parse_size``, ``hardware.cpu.parse_cpu_features``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from llamarig.diagnostics import Diagnostic
from llamarig.flags.argv import Command
from llamarig.hardware.cpu import CpuFeatures
from llamarig.hardware.types import GPU, Hardware
from llamarig.plan.config import ServerConfig, bundled_schema


@dataclass(frozen=True)
class Deployment:
    """What is deployed, with what settings, on what hardware."""

    #: the model as given beside the command (a GGUF path, a catalogue id, ``hf:OWNER/REPO:QUANT``,
    #: ``ms:...``, an https URL); None: the command's own -m / -hf / -mu
    model: str | None
    #: the llama-server command (its program, if any, and every option as llama-server reads it)
    command: Command
    #: what the planner reads of ``command`` (``ServerConfig.from_command``)
    config: ServerConfig
    #: the GPUs (in device order) and the host: RAM, CPU features, cores
    hardware: Hardware
    #: the projector beside the command's own --mmproj: a file, ``catalogue``/``f16``/``bf16`` (a
    #: catalogue model's), ``none``
    mmproj: str | None = None
    #: a separate draft model beside the command's own -md
    draft: str | None = None
    #: the driver/context overhead per GPU (None: each GPU's catalogue figure)
    overhead_bytes: int | None = None
    #: what building the deployment found (which catalogue GPU a name matched, ...)
    diagnostics: tuple[Diagnostic, ...] = ()

    def with_args(self, args: Sequence[str]) -> Deployment:
        """The same model and hardware with the llama-server args ``args`` (a whole command without
        its program) instead: how tune and render plan a changed command."""
        return deployment(self.model, command=["llama-server", *args], hardware=self.hardware, mmproj=self.mmproj,
                          draft=self.draft, overhead_bytes=self.overhead_bytes, diagnostics=self.diagnostics)

    def on(self, hardware: Hardware) -> Deployment:
        """This deployment on other hardware (launch re-plans for the CPU the server reports)."""
        return replace(self, hardware=hardware)


def deployment(model: str | None = None, args: Sequence[str] = (), *, command: Command | Sequence[str] | None = None,
               hardware: Hardware | None = None, mmproj: str | None = None, draft: str | None = None,
               overhead_bytes: int | None = None, diagnostics: tuple[Diagnostic, ...] = ()) -> Deployment:
    """A Deployment from ``model`` (or the command's -m), ``args`` (llama-server flags the planner
    reads; any other is an InputError) and ``command`` (a whole pasted llama-server command:
    flags the planner does not read are kept and listed in ``ServerConfig.ignored``; what
    llama-server would refuse is in ``ServerConfig.problems``; a Command is taken as parsed).
    ``args`` apply after ``command``'s."""
    schema = bundled_schema()
    pasted = Command.of(command, schema) if command is not None else None
    direct = Command.parse(args, schema, program=False) if args or schema is None or pasted is None \
        else Command(None, (), schema)
    cfg = ServerConfig.from_command(pasted) if pasted is not None else None
    cfg = ServerConfig.from_command(direct, base=cfg, strict=True)
    cmd = Command(pasted.program if pasted is not None else None,
                  (*(pasted.args if pasted is not None else ()), *direct.args), direct.schema)
    return Deployment(model, cmd, cfg, hardware or Hardware(), mmproj, draft, overhead_bytes, diagnostics)


def hardware(gpus: Sequence[GPU] = (), *, ram_bytes: int | None = None, cpu: CpuFeatures | None = None,
             detect: bool = False, rpc: Sequence[GPU] = ()) -> Hardware:
    """The hardware a deployment runs on: this machine's (``detect``: GPUs by NVML, else nvidia-smi, RAM,
    cores, CPU features; its ``source`` is then ``detected``), with ``gpus`` (in device order),
    ``ram_bytes`` and ``cpu`` in place of what was detected where given; ``rpc``: the devices
    behind the rpc-servers of ``--rpc``."""
    hw = Hardware()
    if detect:
        from llamarig.detect import detect as detect_here  # lazy: only for --detect (16 ms)

        hw = detect_here()
    if gpus:
        hw = replace(hw, gpus=tuple(gpus))
    if ram_bytes is not None:
        hw = replace(hw, ram_bytes=ram_bytes)
    if cpu is not None:
        hw = replace(hw, cpu=cpu)
    if rpc:
        hw = replace(hw, rpc=tuple(rpc))
    return hw
