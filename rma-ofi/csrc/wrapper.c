/* Out-of-line wrappers of libfabric's `static inline` calls, so that Rust can call them. */
#include "wrapper.h"

uint32_t rma_fi_version(uint32_t major, uint32_t minor) { return FI_VERSION(major, minor); }

int rma_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{ return fi_fabric(attr, fabric, context); }
int rma_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context)
{ return fi_domain(fabric, info, domain, context); }
int rma_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context)
{ return fi_endpoint(domain, info, ep, context); }
int rma_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context)
{ return fi_cq_open(domain, attr, cq, context); }
int rma_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context)
{ return fi_av_open(domain, attr, av, context); }
int rma_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
                  uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{ return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context); }
int rma_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags) { return fi_mr_bind(mr, bfid, flags); }
int rma_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }
uint64_t rma_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
void *rma_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
int rma_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags) { return fi_ep_bind(ep, bfid, flags); }
int rma_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int rma_fi_setopt_min_multi_recv(struct fid_ep *ep, size_t min)
{ return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min); }
int rma_fi_cq_wait_fd(struct fid_cq *cq, int *fd) { return fi_control(&cq->fid, FI_GETWAIT, fd); }
int rma_fi_trywait_cq(struct fid_fabric *fabric, struct fid_cq *cq)
{
    struct fid *fids[1] = { &cq->fid };
    return fi_trywait(fabric, fids, 1);
}
int rma_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen) { return fi_getname(&ep->fid, addr, addrlen); }
int rma_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
                     uint64_t flags, void *context)
{ return fi_av_insert(av, addr, count, fi_addr, flags, context); }
int rma_fi_close(struct fid *fid) { return fi_close(fid); }
int rma_fi_close_ep(struct fid_ep *ep) { return fi_close(&ep->fid); }
int rma_fi_close_cq(struct fid_cq *cq) { return fi_close(&cq->fid); }
int rma_fi_close_av(struct fid_av *av) { return fi_close(&av->fid); }
int rma_fi_close_mr(struct fid_mr *mr) { return fi_close(&mr->fid); }
int rma_fi_close_domain(struct fid_domain *d) { return fi_close(&d->fid); }
int rma_fi_close_fabric(struct fid_fabric *f) { return fi_close(&f->fid); }

ssize_t rma_fi_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, void *context)
{ return fi_send(ep, buf, len, desc, dest, context); }
ssize_t rma_fi_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest)
{ return fi_inject(ep, buf, len, dest); }
ssize_t rma_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *context)
{ return fi_recv(ep, buf, len, desc, src, context); }
ssize_t rma_fi_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{ return fi_recvmsg(ep, msg, flags); }

ssize_t rma_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                     uint64_t addr, uint64_t key, void *context)
{ return fi_write(ep, buf, len, desc, dest, addr, key, context); }
ssize_t rma_fi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{ return fi_writemsg(ep, msg, flags); }
ssize_t rma_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest,
                            uint64_t addr, uint64_t key)
{ return fi_inject_write(ep, buf, len, dest, addr, key); }
ssize_t rma_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
                    uint64_t addr, uint64_t key, void *context)
{ return fi_read(ep, buf, len, desc, src, addr, key, context); }
ssize_t rma_fi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{ return fi_readmsg(ep, msg, flags); }

ssize_t rma_fi_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc, fi_addr_t dest,
                      uint64_t addr, uint64_t key, enum fi_datatype datatype, enum fi_op op, void *context)
{ return fi_atomic(ep, buf, count, desc, dest, addr, key, datatype, op, context); }
ssize_t rma_fi_atomicmsg(struct fid_ep *ep, const struct fi_msg_atomic *msg, uint64_t flags)
{ return fi_atomicmsg(ep, msg, flags); }
ssize_t rma_fi_fetch_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                            void *result, void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                            enum fi_datatype datatype, enum fi_op op, void *context)
{ return fi_fetch_atomic(ep, buf, count, desc, result, result_desc, dest, addr, key, datatype, op, context); }
ssize_t rma_fi_compare_atomic(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                              const void *compare, void *compare_desc, void *result, void *result_desc,
                              fi_addr_t dest, uint64_t addr, uint64_t key,
                              enum fi_datatype datatype, enum fi_op op, void *context)
{ return fi_compare_atomic(ep, buf, count, desc, compare, compare_desc, result, result_desc,
                           dest, addr, key, datatype, op, context); }
int rma_fi_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count)
{ return fi_atomicvalid(ep, datatype, op, count); }
int rma_fi_fetch_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count)
{ return fi_fetch_atomicvalid(ep, datatype, op, count); }
int rma_fi_compare_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op, size_t *count)
{ return fi_compare_atomicvalid(ep, datatype, op, count); }

ssize_t rma_fi_cq_read(struct fid_cq *cq, void *buf, size_t count) { return fi_cq_read(cq, buf, count); }
ssize_t rma_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{ return fi_cq_readerr(cq, buf, flags); }
const char *rma_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len)
{ return fi_cq_strerror(cq, prov_errno, err_data, buf, len); }
