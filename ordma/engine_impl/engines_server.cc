// The backend factory, server side: make_engine (engines.cc has the client's side).
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "ordma/engine.h"
#include "ordma/engine_impl/soft/soft_engine.h"
#if ODAFS_HAVE_VERBS
#include "ordma/engine_impl/verbs/verbs_engine.h"
#endif

namespace odafs::ordma {

std::vector<BackendSetting> backend_settings() {
  std::vector<BackendSetting> all(std::begin(kSoftSettings), std::end(kSoftSettings));
#if ODAFS_HAVE_VERBS
  all.insert(all.end(), std::begin(kVerbsSettings), std::end(kVerbsSettings));
#endif
  return all;
}

std::unique_ptr<Engine> make_engine(const EngineOptions& options, ExportedMemory memory) {
  if (options.kind == "soft") return make_soft_engine(options, memory);
#if ODAFS_HAVE_VERBS
  if (options.kind == "verbs") return make_verbs_engine(options, memory);
#endif
  throw std::invalid_argument(
      "no one-sided engine backend named '" + options.kind +
      "' in this build (built: " + (built_backends().size() > 1 ? "soft, verbs" : "soft") + ")");
}

}  // namespace odafs::ordma
