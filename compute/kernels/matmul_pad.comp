// An operand of the tensor-core product copied into scratch memory with its
// rows padded: x, `rows` rows of `cols` elements `ld` apart, becomes the
// dense [rowsP][colsP] y (rowsP >= rows, colsP >= cols, a multiple of 8),
// zeros past x's rows and columns. template_matmul.cpp's dispatchPadded
// then runs the product on y, 16 bytes at a time. One invocation per
// element of y: neighbouring invocations read and write neighbouring
// elements.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  uint rows, cols, ld, rowsP, colsP;
} p;

void main() {
  const uint total = p.rowsP * p.colsP, stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
    const uint r = i / p.colsP, c = i % p.colsP;
    if (r < p.rows && c < p.cols) {
      p.y.v[i] = p.x.v[r * p.ld + c];
    } else {
      p.y.v[i] = ZERO;
    }
  }
}
