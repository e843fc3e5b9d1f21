// absl::Status -> Python exceptions for the _torus_core module: DeadlineExceeded -> ValueError("timeout: ..."),
// NotFound -> KeyError, InvalidArgument and AlreadyExists -> ValueError, Cancelled -> the pending Python error (KeyboardInterrupt
// from a signal) when there is one, anything else -> RuntimeError.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace torus::core {

[[noreturn]] inline void RaiseStatus(const absl::Status& s) {
  namespace py = pybind11;
  const std::string message(s.message());
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      throw py::value_error(absl::StrCat("timeout: ", message));
    case absl::StatusCode::kNotFound:
      throw py::key_error(message);
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
      throw py::value_error(message);
    case absl::StatusCode::kCancelled:
      if (PyErr_Occurred() != nullptr) throw py::error_already_set();
      throw std::runtime_error(message);
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace torus::core
