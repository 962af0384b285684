"""Named like the standard library's json: allowed by the allowlist, refused when loading (shadowed)."""


def loads(response, ground_truth):
    return 1.0
