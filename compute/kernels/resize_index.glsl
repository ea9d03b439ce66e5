// PyTorch's index mapping of a resize (interpolate.comp and its backward,
// interpolate_backward.comp, which must agree on it bit for bit).

// Source coordinate of output index o (bilinear): align_corners: o * scale;
// else max((o + 0.5) * scale - 0.5, 0).
float sourceIndex(int o, float scale, bool alignCorners) {
  if (alignCorners) return float(o) * scale;
  precise float s = (float(o) + 0.5) * scale;
  return max(s - 0.5, 0.0);
}

// Input index output o reads (nearest: min(floor(o * scale), size - 1);
// nearest-exact: floor((o + 0.5) * scale)).
int nearestIndex(int o, float scale, int size, bool exact) {
  precise float s = (exact ? float(o) + 0.5 : float(o)) * scale;
  return min(int(floor(s)), size - 1);
}
