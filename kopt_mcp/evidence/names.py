"""Display names for GPU kernels: the demangled names profilers report are often kilobytes long.

`short_kernel_name` keeps the namespace-qualified function name and drops the return type, the
template arguments and the parameter list, so a report row fits on one line. It is for display
only: grouping and the `[profiler] kernel` regex always use the full name.
"""

from __future__ import annotations

import re

MAX_DISPLAY_CHARS = 80

#: kernels that make or move inputs, never optimization targets: torch's random-number, fill and
#: copy kernels (triton.testing.do_bench zeroes a 256 MB buffer before every repetition: a fill
#: kernel that is often the hottest), memset/memcpy; demangled or mangled names
UTILITY_KERNEL = re.compile(
    r"(FillFunctor|fill_kernel|distribution_elementwise|distribution_nullary|normal_kernel|uniform_kernel|"
    r"random_kernel|curand|philox|direct_copy_kernel|copy_kernel|CatArrayBatchedCopy|"
    r"\bmemset|\bmemcpy|Memset|Memcpy|12distribution|17direct_copy_kernel)")


def is_utility_kernel(name: str) -> bool:
    """True for an input-generation or copy kernel (UTILITY_KERNEL): never the default target."""
    return UTILITY_KERNEL.search(name) is not None

_ANON_NAMESPACE = re.compile(r"(?:\(anonymous namespace\)|<unnamed>|\{anonymous\})::")
_RETURN_TYPES = ("void ", "__global__ void ")


def short_kernel_name(name: str, max_chars: int = MAX_DISPLAY_CHARS) -> str:
    """A one-line display name for a demangled kernel name, at most `max_chars` characters.

    "void at::<unnamed>::softmax_warp_forward<float, 11>(T2 *, int)" -> "at::softmax_warp_forward".
    Anonymous namespaces ("<unnamed>::", "(anonymous namespace)::") are dropped; `operator()` is
    kept as part of the name. A name that is already plain ("nvjet_sm90_tst_...") comes back as is;
    a name longer than `max_chars` after shortening is cut and ends in "...". Never raises.
    """
    text = name.strip()
    for prefix in _RETURN_TYPES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = _ANON_NAMESPACE.sub("", text)
    short = _strip_templates_and_params(text).strip()
    if not short:
        short = text.strip() or name
    if len(short) > max_chars:
        short = short[: max_chars - 3].rstrip() + "..."
    return short


def function_name(name: str) -> str:
    """The unqualified function name of a (demangled) kernel name:
    "void at::native::reduce_kernel<512, 1>(...)" -> "reduce_kernel"; a plain Triton name
    ("_rms_norm_fwd") stays as is. Nsight Compute's `--kernel-name-base function` matches these, and
    `kopt-mcp init` compares them with the functions a repository defines. Never raises."""
    return short_kernel_name(name, 1 << 20).rsplit("::", 1)[-1].strip()


def _strip_templates_and_params(text: str) -> str:
    """Drop every <...> group, and stop at the parameter list: the first top-level '(' that
    does not belong to `operator()`."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            if _ends_with_operator(out) and depth == 0:
                out.append(ch)  # operator< / operator<<
            else:
                depth += 1
        elif ch == ">":
            if i > 0 and text[i - 1] == "-":
                pass  # "->" inside a lambda or template argument: not a bracket
            elif depth > 0:
                depth -= 1
            else:
                out.append(ch)
        elif depth == 0:
            if ch == "(":
                if _ends_with_operator(out) and text.startswith("()", i):
                    out.append("()")
                    i += 2
                    continue
                break
            out.append(ch)
        i += 1
    return "".join(out)


def _ends_with_operator(out: list[str]) -> bool:
    """True when the text collected so far ends in the keyword `operator` (maybe plus a space or
    the first '<' of `operator<<`)."""
    return "".join(out[-11:]).rstrip().rstrip("<").rstrip().endswith("operator")
