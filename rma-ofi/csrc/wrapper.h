/* What bindgen binds: libfabric's public headers plus our wrappers of its inline calls. */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

/* FI_VERSION is a macro bindgen cannot bind. */
uint32_t rma_fi_version(uint32_t major, uint32_t minor);

int rma_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int rma_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context);
int rma_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int rma_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
int rma_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int rma_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
                  uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int rma_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int rma_fi_mr_enable(struct fid_mr *mr);
uint64_t rma_fi_mr_key(struct fid_mr *mr);
void *rma_fi_mr_desc(struct fid_mr *mr);
int rma_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int rma_fi_enable(struct fid_ep *ep);
int rma_fi_setopt_min_multi_recv(struct fid_ep *ep, size_t min);
/* The CQ's wait object (FI_WAIT_FD) and fi_trywait on it (both inline in the headers). */
int rma_fi_cq_wait_fd(struct fid_cq *cq, int *fd);
int rma_fi_trywait_cq(struct fid_fabric *fabric, struct fid_cq *cq);
int rma_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen);
int rma_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
                     uint64_t flags, void *context);
int rma_fi_close(struct fid *fid);
int rma_fi_close_ep(struct fid_ep *ep);
int rma_fi_close_cq(struct fid_cq *cq);
int rma_fi_close_av(struct fid_av *av);
int rma_fi_close_mr(struct fid_mr *mr);
int rma_fi_close_domain(struct fid_domain *d);
int rma_fi_close_fabric(struct fid_fabric *f);

ssize_t rma_fi_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, void *context);
ssize_t rma_fi_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest);
ssize_t rma_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *context);
ssize_t rma_fi_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags);

ssize_t rma_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                     uint64_t addr, uint64_t key, void *context);
ssize_t rma_fi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags);
ssize_t rma_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest,
                            uint64_t addr, uint64_t key);
ssize_t rma_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
                    uint64_t addr, uint64_t key, void *context);
ssize_t rma_fi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags);

ssize_t rma_fi_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc, fi_addr_t dest,
                      uint64_t addr, uint64_t key, enum fi_datatype datatype, enum fi_op op, void *context);
ssize_t rma_fi_atomicmsg(struct fid_ep *ep, const struct fi_msg_atomic *msg, uint64_t flags);
ssize_t rma_fi_fetch_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                            void *result, void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                            enum fi_datatype datatype, enum fi_op op, void *context);
ssize_t rma_fi_compare_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                              const void *compare, void *compare_desc, void *result, void *result_desc,
                              fi_addr_t dest, uint64_t addr, uint64_t key,
                              enum fi_datatype datatype, enum fi_op op, void *context);
int rma_fi_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count);
int rma_fi_fetch_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count);
int rma_fi_compare_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count);

ssize_t rma_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t rma_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *rma_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len);
