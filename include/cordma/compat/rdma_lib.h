/* Lets rdma_lib programs' #include "rdma_lib.h" find cordma's
   compatibility header: cordma.pc puts this folder on the include path. */
#include <cordma/rdma_lib.h>
