#include "offer_journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace tunehost::host {

namespace fs = std::filesystem;

namespace {

Status Errno(const std::string& what, const fs::path& file) {
  return Status::Unavailable(what + " " + file.string() + ": " + std::strerror(errno));
}

uint32_t LoadLength(const char* at) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(at[i])) << (8 * i);
  return n;
}

void StoreLength(char* at, uint32_t n) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(n >> (8 * i));
}

}  // namespace

fs::path OfferJournal::For(const fs::path& store_file) {
  fs::path f = store_file;
  f += "-offers";
  return f;
}

OfferJournal::~OfferJournal() {
  if (map_ != nullptr) munmap(map_, kCapacity);
}

Status OfferJournal::Open() {
  if (map_ != nullptr) return Status::Ok();
  // Private to its user whatever the umask, as the store (wire-format.md §9).
  const int fd = open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot open offer journal", file_);
  fchmod(fd, 0600);
  // Blocks for the whole file now: a page written through the mapping then
  // never needs one from a full disk (which would be a SIGBUS, not an error).
  Status st;
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(kCapacity)); err != 0) {
    errno = err;
    st = Errno("cannot allocate offer journal", file_);
  } else if (void* map = mmap(nullptr, kCapacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
             map == MAP_FAILED) {
    st = Errno("cannot map offer journal", file_);
  } else {
    map_ = static_cast<char*>(map);
  }
  close(fd);  // the mapping keeps the file
  return st;
}

Status OfferJournal::Append(const JournalRecord& record) {
  Status st = Open();
  if (!st.ok()) return st;
  buffer_.clear();
  msgpack::pack(buffer_, record);
  const size_t n = buffer_.size();
  if (n > kCapacity || kCapacity - n < used_ + 8) {
    return Status::Unavailable("offer journal " + file_.string() + " is full");
  }
  // The body and the terminator of the next record first, the length (which
  // the previous terminator held as 0) last: a host that dies halfway
  // leaves a journal that ends before this record.
  std::memcpy(map_ + used_ + 4, buffer_.data(), n);
  StoreLength(map_ + used_ + 4 + n, 0);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  StoreLength(map_ + used_, static_cast<uint32_t>(n));
  used_ += 4 + n;
  return Status::Ok();
}

Status OfferJournal::ReadAll(std::vector<JournalRecord>* out, size_t* torn_bytes) const {
  out->clear();
  *torn_bytes = 0;
  std::error_code ec;
  if (!fs::exists(file_, ec)) return Status::Ok();
  std::ifstream in(file_, std::ios::binary);
  if (!in) return Errno("cannot read offer journal", file_);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (data.size() - at >= 4) {
    const uint32_t n = LoadLength(data.data() + at);
    if (n == 0) break;
    if (n > data.size() - at - 4) {
      *torn_bytes = data.size() - at;
      break;
    }
    JournalRecord record;
    try {
      msgpack::object_handle oh = msgpack::unpack(data.data() + at + 4, n);
      oh.get().convert(record);
    } catch (const std::exception&) {
      *torn_bytes = 4 + n;
      break;
    }
    out->push_back(std::move(record));
    at += 4 + n;
  }
  return Status::Ok();
}

Status OfferJournal::Clear() {
  used_ = 0;
  if (map_ != nullptr) {
    StoreLength(map_, 0);
    return Status::Ok();
  }
  std::error_code ec;
  if (!fs::exists(file_, ec) || truncate(file_.c_str(), 0) == 0) return Status::Ok();
  return Errno("cannot empty offer journal", file_);
}

}  // namespace tunehost::host
