#include "fs/boundary_note.h"

#include <utility>

namespace acqfs {
namespace {

thread_local BoundaryNote note;

}  // namespace

void NoteBoundary(const char* boundary, std::string_view rel) {
  if (note.boundary != nullptr) return;
  note.boundary = boundary;
  note.rel.assign(rel);
}

bool BoundaryNoted() { return note.boundary != nullptr; }

BoundaryNote TakeBoundaryNote() {
  BoundaryNote taken = std::move(note);
  note = BoundaryNote{};
  return taken;
}

void ClearBoundaryNote() {
  note.boundary = nullptr;
  note.rel.clear();
}

}  // namespace acqfs
