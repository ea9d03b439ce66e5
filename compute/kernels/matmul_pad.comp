// An operand of the tensor-core product copied into scratch memory with its
// rows padded: each of `batch` matrices of x, `rows` rows of `cols`
// elements `ld` apart, becomes a dense [rowsP][colsP] matrix of y (rowsP >=
// rows, colsP >= cols, a multiple of 8), zeros past x's rows and columns,
// the matrices one after another. Matrix bi of x starts at the offset its
// index has over the batch dims (`sizes`, `strides`; the last dim
// fastest, as in matmul_coop.comp). template_matmul.cpp's dispatchPadded
// then runs the product on y, 16 bytes at a time. One invocation per
// element of y: neighbouring invocations read and write neighbouring
// elements.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  uint rows, cols, ld, rowsP, colsP, batch, batchRank;
  uint sizes[4];
  uint strides[4];
} p;

void main() {
  const uint matrix = p.rowsP * p.colsP, total = matrix * p.batch, stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
    const uint e = i % matrix, r = e / p.colsP, c = e % p.colsP;
    uint rem = i / matrix, offset = 0u;
    for (int d = int(p.batchRank) - 1; d >= 0; --d) {
      offset += (rem % p.sizes[d]) * p.strides[d];
      rem /= p.sizes[d];
    }
    if (r < p.rows && c < p.cols) {
      p.y.v[i] = p.x.v[offset + r * p.ld + c];
    } else {
      p.y.v[i] = ZERO;
    }
  }
}
