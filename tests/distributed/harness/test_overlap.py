"""llmlab.distributed.harness.overlap's DDP bucket sweep: the bucket size changes the number of
all-reduces, never the bytes each rank sends, which equal DDP's formula."""

from llmlab.distributed import launch
from llmlab.distributed.harness.overlap import ddp_bucket_sweep, table


def test_smaller_buckets_make_more_all_reduces_of_the_same_bytes():
    rows = launch(ddp_bucket_sweep, nprocs=2, args=((1.0, 100.0), 1))[0]
    small, large = rows
    assert small.calls["all_reduce"] > large.calls["all_reduce"] == 1
    assert small.sent_bytes == large.sent_bytes
    assert abs(large.sent_bytes - large.formula_bytes) <= 0.01 * large.formula_bytes
    assert "DDP bucket_cap_mb=100" in table(rows)
