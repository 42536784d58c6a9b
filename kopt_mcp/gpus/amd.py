"""AMD GPU probes: the `amdsmi` library, the `amd-smi` CLI, `rocm-smi`, and amdgpu's sysfs files.

Which signal says "idle" on AMD
-------------------------------
The gate's decision rests on **VRAM used and busy %**, read from the driver's own counters
(amdgpu sysfs `mem_info_vram_used` / `gpu_busy_percent`, which rocm-smi and amd-smi also report).
They stay right while another process holds the GPU: a process that allocated memory moves VRAM
used whether or not a tool can name it. Process lists are added as *extra* busy reasons only,
never as proof of idleness:

- `amd-smi process` lists a process under every GPU it has opened, with the same numbers under
  each (tests/fixtures/amd_smi/*.source.txt), and shows nothing for processes in another PID
  namespace / of another user without privileges;
- `rocm-smi --showpids` gives the *number* of GPUs a process uses, not which ones, so its
  processes are attributed to a GPU only on a host with a single AMD GPU.

So a probe never reports a GPU with unknown VRAM used: where it cannot read it, it raises
ProbeError (the gate then fails loudly instead of leasing a GPU it could not see).

Identity
--------
`index` is the index `ROCR_VISIBLE_DEVICES` takes (see `lease.binding_env`): rocm-smi's `cardN`,
amd-smi's `gpu`, the enumeration order of amdsmi handles, or the order of AMD `cardN` entries in
sysfs. These orders agree on ordinary hosts (all follow the KFD / PCI order); that was not checked
on hardware here. `uuid` (the lease key) is the PCI bus id ("0000:03:00.0") where the source gives
one, so that every AMD backend locks the same file for the same GPU; else f"amd-gpu-{index}".
"""

from kopt_mcp.gpus.amd_common import AMD_VENDOR_ID, on_path
from kopt_mcp.gpus.amd_rocm_smi import (
                                        K_BUS,
                                        K_SERIES,
                                        K_USE,
                                        K_VRAM_TOTAL,
                                        K_VRAM_USED,
                                        NO_KFD_PIDS,
                                        ROCM_SMI_GPU_COMMAND,
                                        ROCM_SMI_PIDS_COMMAND,
                                        RocmSmiProbe,
                                        parse_rocm_smi,
                                        parse_showpids,
)
from kopt_mcp.gpus.amd_smi_cli import AMD_SMI_PROCESS_COMMAND, AmdSmiCliProbe, parse_amd_smi_process
from kopt_mcp.gpus.amd_smi_lib import AmdSmiLibProbe
from kopt_mcp.gpus.amd_sysfs import SysfsProbe

__all__ = ["AMD_SMI_PROCESS_COMMAND", "AMD_VENDOR_ID", "K_BUS", "K_SERIES", "K_USE", "K_VRAM_TOTAL", "K_VRAM_USED",
           "NO_KFD_PIDS", "ROCM_SMI_GPU_COMMAND", "ROCM_SMI_PIDS_COMMAND", "AmdSmiCliProbe", "AmdSmiLibProbe",
           "RocmSmiProbe", "SysfsProbe", "on_path", "parse_amd_smi_process", "parse_rocm_smi", "parse_showpids"]
