// Math helpers for elementwise expressions, spliced ahead of the kernel body.
// The float ones take and return float (the compute type of f32/f16/bf16).

float erfc_f(float x) {
  // Numerical Recipes' erfc: fractional error below 1.2e-7 everywhere.
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? r : 2.0 - r;
}

float erf_f(float x) {
  if (abs(x) < 0.5) {
    // Taylor series: 1 - erfc would lose the relative precision near 0.
    float x2 = x * x;
    return 1.1283791670955126 * x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (1.0 / 10.0 + x2 * (-1.0 / 42.0 +
           x2 * (1.0 / 216.0 + x2 * (-1.0 / 1320.0))))));
  }
  return 1.0 - erfc_f(x);
}

float erfinv_f(float x) {
  // M. Giles, "Approximating the erfinv function" (single precision), then
  // two Newton steps on erf for full float accuracy.
  if (x <= -1.0) return x == -1.0 ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7fc00000u);
  if (x >= 1.0) return x == 1.0 ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(0x7fc00000u);
  float w = -log((1.0 - x) * (1.0 + x));
  float r;
  if (w < 5.0) {
    w -= 2.5;
    r = 2.81022636e-08;
    r = 3.43273939e-07 + r * w;
    r = -3.5233877e-06 + r * w;
    r = -4.39150654e-06 + r * w;
    r = 0.00021858087 + r * w;
    r = -0.00125372503 + r * w;
    r = -0.00417768164 + r * w;
    r = 0.246640727 + r * w;
    r = 1.50140941 + r * w;
  } else {
    w = sqrt(w) - 3.0;
    r = -0.000200214257;
    r = 0.000100950558 + r * w;
    r = 0.00134934322 + r * w;
    r = -0.00367342844 + r * w;
    r = 0.00573950773 + r * w;
    r = -0.0076224613 + r * w;
    r = 0.00943887047 + r * w;
    r = 1.00167406 + r * w;
    r = 2.83297682 + r * w;
  }
  r *= x;
  for (int k = 0; k < 2; ++k) r -= (erf_f(r) - x) / (1.1283791670955126 * exp(-r * r));
  return r;
}

float expm1_f(float x) {
  if (abs(x) < 1e-3) return x + 0.5 * x * x + x * x * x / 6.0;
  return exp(x) - 1.0;
}

float log1p_f(float x) {
  // Exact compensation: log(u) * x / (u - 1) with u = 1 + x (Goldberg).
  float u = 1.0 + x;
  if (u == 1.0) return x;
  return log(u) * x / (u - 1.0);
}

float sigmoid_f(float x) { return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

float softplus_f(float x, float beta, float threshold) {
  return x * beta > threshold ? x : log1p_f(exp(x * beta)) / beta;
}

float round_half_even(float x) { return roundEven(x); }

float nan_f() { return uintBitsToFloat(0x7fc00000u); }
float inf_f() { return uintBitsToFloat(0x7f800000u); }

// Python's floor division and modulo (the result takes the divisor's sign).
int floordiv_i(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
int mod_i(int a, int b) { int r = a - (a / b) * b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
float mod_f(float a, float b) { float r = a - b * floor(a / b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
float fmod_f(float a, float b) { return a - b * trunc(a / b); }
int pow_i(int a, int e) { int r = 1; for (int k = 0; k < 32 && e > 0; ++k) { if ((e & 1) != 0) r *= a; a *= a; e >>= 1; } return e < 0 ? 0 : r; }
#ifdef DT_I64
// Only where the compute type is i64, so other kernels need no Int64 capability.
int64_t floordiv_l(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0l) != (b < 0l))) ? q - 1l : q; }
int64_t mod_l(int64_t a, int64_t b) { int64_t r = a - (a / b) * b; return (r != 0l && ((r < 0l) != (b < 0l))) ? r + b : r; }
int64_t pow_l(int64_t a, int64_t e) { int64_t r = 1l; for (int k = 0; k < 64 && e > 0l; ++k) { if ((e & 1l) != 0l) r *= a; a *= a; e >>= 1; } return r; }
#endif
float pow_f(float a, float e) {
  // GLSL's pow is undefined for a < 0; PyTorch follows C's pow.
  if (e == 0.0) return 1.0;
  if (a >= 0.0) return pow(a, e);
  if (floor(e) != e) return nan_f();
  float m = pow(-a, e);
  return mod(e, 2.0) == 1.0 ? -m : m;
}

// Inverse trigonometry after Cephes (single precision, ~1e-7 relative):
// some drivers' builtins are only good to ~1e-4.
float atan_f(float x) {
  float s = x < 0.0 ? -1.0 : 1.0;
  x = abs(x);
  float y = 0.0;
  if (x > 2.414213562373095) {
    y = 1.5707963267948966;
    x = -1.0 / x;
  } else if (x > 0.4142135623730950) {
    y = 0.7853981633974483;
    x = (x - 1.0) / (x + 1.0);
  }
  float z = x * x;
  y += (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * x + x;
  return s * y;
}

float atan2_f(float y, float x) {
  if (x == 0.0) {
    if (y == 0.0) return (floatBitsToUint(x) >> 31) != 0u ? ((floatBitsToUint(y) >> 31) != 0u ? -3.141592653589793 : 3.141592653589793) : y;
    return y > 0.0 ? 1.5707963267948966 : -1.5707963267948966;
  }
  if (isinf(x) || isinf(y)) return atan(y, x);
  float r = atan_f(y / x);
  if (x < 0.0) r += (y < 0.0 || (y == 0.0 && (floatBitsToUint(y) >> 31) != 0u)) ? -3.141592653589793 : 3.141592653589793;
  return r;
}

float asin_f(float x) {
  float a = abs(x);
  if (a > 1.0) return nan_f();
  float z, r;
  if (a > 0.5) {
    z = 0.5 * (1.0 - a);
    float s = sqrt(z);
    float p = (((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z + 1.6666752422e-1;
    r = 1.5707963267948966 - 2.0 * (s + s * z * p);
  } else {
    z = a * a;
    float p = (((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z + 1.6666752422e-1;
    r = a + a * z * p;
  }
  return x < 0.0 ? -r : r;
}

float acos_f(float x) {
  if (x > 0.5) return 2.0 * asin_f(sqrt(0.5 * (1.0 - x)));
  if (x < -0.5) return 3.141592653589793 - 2.0 * asin_f(sqrt(0.5 * (1.0 + x)));
  return 1.5707963267948966 - asin_f(x);
}
