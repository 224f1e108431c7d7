"""The float vs quantized comparison: what is compared (plan), the float side (reference),
the comparison itself (analysis), the per-sample metrics and the ranked report."""
