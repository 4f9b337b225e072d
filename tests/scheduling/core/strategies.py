"""Hypothesis strategies shared by the core's and the shell's tests."""

from __future__ import annotations

from hypothesis import strategies as st

from scheduling.core import quantity
from scheduling.core.types import Resources

_EXTENDED = st.dictionaries(
    st.sampled_from(["example.com/credits", "rdma/hca", "ephemeral-storage", "hugepages-2Mi"]),
    st.integers(1, 10**6),
    max_size=4,
)
_GPU_FORM = st.one_of(
    st.just({}),
    st.builds(lambda n: {"gpus": n}, st.integers(1, quantity.MAX_GPUS)),
    st.builds(lambda n: {"gpu_milli": n}, st.integers(1, 999)),
    st.builds(
        lambda p, n: {"mig_profile": p, "mig_count": n},
        st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me"]),
        st.integers(1, quantity.MAX_MIG),
    ),
)
RESOURCES = st.builds(
    lambda cpu, memory, form, extended: Resources(
        cpu_milli=cpu, memory_mib=memory, extended=extended, **form
    ),
    st.integers(0, quantity.MAX_CPU_MILLI),
    st.integers(0, quantity.MAX_MEMORY_MIB),
    _GPU_FORM,
    _EXTENDED,
)
