"""Everything a PTQ call writes: the log folder, TensorBoard runs, figures and report files."""
