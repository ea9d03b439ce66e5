// Element type names and sizes of the public client API.

#include "tensord/client.h"

namespace tensord {

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
    case DType::Bool:
      return "bool";
  }
  return "unknown";
}

uint32_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

}  // namespace tensord
