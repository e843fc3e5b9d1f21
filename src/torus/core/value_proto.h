// Values on the wire: core.proto's ObjectValue to and from the core's Value (inline bytes, or where a stored value
// lies).
// Thread-safety: pure functions.
#pragma once

#include "torus/core.pb.h"
#include "torus/core/object_table.h"

namespace torus::core {

inline void ToProto(const Value& value, ObjectValue* out) {
  out->set_data(value.data);
  out->set_format(value.format);
  for (const std::string& b : value.buffers) out->add_buffers(b);
  if (value.stored()) {
    out->set_location(value.location);
    out->set_stored_size(static_cast<int64_t>(value.stored_size));
  }
  for (const auto& [id, owner] : value.contained) {
    ObjectRef* ref = out->add_contained();
    ref->set_object_id(id);
    ref->set_owner_address(owner);
  }
}

inline void MoveToProto(Value&& value, ObjectValue* out) {
  out->set_data(std::move(value.data));
  out->set_format(std::move(value.format));
  for (std::string& b : value.buffers) out->add_buffers(std::move(b));
  if (value.stored()) {
    out->set_location(std::move(value.location));
    out->set_stored_size(static_cast<int64_t>(value.stored_size));
  }
  for (auto& [id, owner] : value.contained) {
    ObjectRef* ref = out->add_contained();
    ref->set_object_id(std::move(id));
    ref->set_owner_address(std::move(owner));
  }
}

inline Value FromProto(const ObjectValue& v) {
  Value value{.data = v.data(),
              .format = v.format(),
              .buffers = {v.buffers().begin(), v.buffers().end()},
              .location = v.location(),
              .stored_size = static_cast<uint64_t>(std::max<int64_t>(0, v.stored_size()))};
  for (const ObjectRef& ref : v.contained()) value.contained.emplace_back(ref.object_id(), ref.owner_address());
  return value;
}

}  // namespace torus::core
