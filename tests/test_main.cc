#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/support/server_process.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  if (int bad = odafs::test::abnormal_server_exits(); bad != 0) {
    std::fprintf(stderr, "%d odafsd process(es) exited abnormally (see above)\n", bad);
    return rc == 0 ? 1 : rc;
  }
  return rc;
}
