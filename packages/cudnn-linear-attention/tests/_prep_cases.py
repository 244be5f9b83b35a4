"""Shared names of the KDA prep-kernel option tests (``test_kda_prep_opts_gpu.py``, ``test_kda_prep_speed_gpu.py``,
``test_kda_prep_staged_gpu.py``): the prep kernel's workspace arrays and the family's DSL gates. Imports neither torch
nor the DSL (the test modules import it at collection, in every lane). Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

#: What KDA's prep kernel writes (vnt, h: the state pass; rf: GDN only).
PREP_ARRAYS = ("w", "u", "kd", "qg", "p", "ge")
#: The KDA family's CuTe DSL floor (its ``CUTEDSL_MIN_VERSION``).
FLOOR = "4.8.0"


def skip_unless_kda_dsl():
    """Skip (the compile tier) below the KDA family's DSL floor."""
    skip_unless_cutedsl(FLOOR, "cudnn.linear_attention.kimi_delta_attention")


def require_kda_gpu():
    """Skip (the GPU tier) without an sm_90 GPU or below the KDA family's DSL floor."""
    skip_unless_sm90()
    skip_unless_kda_dsl()
