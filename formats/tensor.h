// A host tensor: dtype, shape and a pointer to contiguous row-major bytes that it keeps
// alive (a memory-mapped file, a decompressed buffer, or its own vector).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/dtype.h"

namespace ssdq {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
// Product of the dims; fails (naming `what`) on a negative dim or on overflow past 2^62.
int64_t checked_numel(const Shape& shape, const std::string& what);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> keepalive;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Any numeric dtype converted to fp32 (integers by value).
  std::vector<float> to_f32() const;
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }

  static Tensor own(DType dtype, Shape shape, std::vector<uint8_t> bytes);
  static Tensor from_f32(Shape shape, const std::vector<float>& values);
  static Tensor from_i32(Shape shape, const std::vector<int32_t>& values);
  static Tensor from_f64(Shape shape, const std::vector<double>& values);
  static Tensor from_i64(Shape shape, const std::vector<int64_t>& values);
};

using TensorMap = std::map<std::string, Tensor>;

}  // namespace ssdq
