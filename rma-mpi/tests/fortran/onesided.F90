! librma-mpi from Fortran: one program, compiled three ways (-DMPIF_H: include 'mpif.h';
! default: use mpi; -DF08: use mpi_f08). Windows of MPI_WIN_ALLOCATE and MPI_WIN_CREATE,
! their attributes, puts and sum accumulates in a fence epoch, gets under a shared lock,
! fetch_and_op under lock_all, requests (MPI_RPUT, MPI_RGET, MPI_RGET_ACCUMULATE) waited
! for with MPI_WAIT, MPI_WAITALL and MPI_TEST, an exclusive lock over the application's
! memory; every result checked exactly. With the argument "rma", every window must be librma-mpi's:
! its Fortran handle in librma-mpi's range (0x13000000 + index, under MPICH and Open MPI
! alike), and so every request (0x400000 + index under MPICH, 0x14000000 + index under
! Open MPI). Prints " No Errors" on rank 0 when all hold. Runs on 2 or 4 ranks.
#ifdef F08
#define WIN_T type(MPI_Win)
#define REQ_T type(MPI_Request)
#define HANDLE(w) w%MPI_VAL
#else
#define WIN_T integer
#define REQ_T integer
#define HANDLE(w) w
#endif
! The delete function of the keyval section: counts its calls, sums the values it is
! given, keeps the last extra state and window handle it saw.
module keyval_deletes
#ifdef F08
  use mpi_f08
#elif !defined(MPIF_H)
  use mpi
#endif
  implicit none
#ifdef MPIF_H
  include 'mpif.h'
#endif
  ! Only these: the program has the MPI's own names from its own use or include.
  private
  public :: count_delete, deletes, deleted_sum, last_extra, last_win, last_keyval
  integer :: deletes = 0, last_win = -1, last_keyval = -1
  integer(kind=MPI_ADDRESS_KIND) :: deleted_sum = 0, last_extra = -1
contains
  subroutine count_delete(win, keyval, attribute_val, extra_state, ierror)
    WIN_T :: win
    integer :: keyval, ierror
    integer(kind=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    deletes = deletes + 1
    deleted_sum = deleted_sum + attribute_val
    last_extra = extra_state
    last_win = HANDLE(win)
    last_keyval = keyval
    ierror = MPI_SUCCESS
  end subroutine
end module

program onesided
  use, intrinsic :: iso_c_binding
  use keyval_deletes
#ifdef F08
  use mpi_f08
#elif !defined(MPIF_H)
  use mpi
#endif
  implicit none
#ifdef MPIF_H
  include 'mpif.h'
#endif
  integer :: keyval, win3_handle
  WIN_T :: win3
  integer(kind=MPI_ADDRESS_KIND) :: extra, aval
  integer :: ierr, rank, nprocs, left, right, errors, total, val, got, one, old, r
  WIN_T :: win, win2
  REQ_T :: req, reqs(2)
  integer, asynchronous :: vals(2), gots(2)
  logical :: done
  integer(kind=MPI_ADDRESS_KIND) :: wsize, tdisp, attr
  logical :: flag, check_rma
  character(len=16) :: arg
  integer, pointer :: buf(:)
  integer, target :: local(4)
#ifdef F08
  type(c_ptr) :: base
#else
  integer(kind=MPI_ADDRESS_KIND) :: base
#endif

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  check_rma = .false.
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    check_rma = trim(arg) == 'rma'
  end if
  errors = 0
  left = mod(rank - 1 + nprocs, nprocs)
  right = mod(rank + 1, nprocs)

  ! ---- MPI_WIN_ALLOCATE: 4 integers ----
  wsize = 16
  call MPI_Win_allocate(wsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, base, win, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_allocate ierr')
#ifdef F08
  call c_f_pointer(base, buf, [4])
#else
  call c_f_pointer(transfer(base, c_null_ptr), buf, [4])
#endif
  call ours(HANDLE(win), 'win_allocate')
  buf = 0
  call MPI_Win_get_attr(win, MPI_WIN_SIZE, attr, flag, ierr)
  call expect_true(flag, 'MPI_WIN_SIZE flag')
  call expect(int(attr), 16, 'MPI_WIN_SIZE')
  call MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, attr, flag, ierr)
  call expect(int(attr), 4, 'MPI_WIN_DISP_UNIT')
  call MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, attr, flag, ierr)
  call expect(int(attr), MPI_WIN_FLAVOR_ALLOCATE, 'MPI_WIN_CREATE_FLAVOR')

  ! Fence: a put to the right, a sum into everyone's second integer.
  call MPI_Win_fence(0, win, ierr)
  val = 100 + rank
  tdisp = 0
  call MPI_Put(val, 1, MPI_INTEGER, right, tdisp, 1, MPI_INTEGER, win, ierr)
  call expect(ierr, MPI_SUCCESS, 'put ierr')
  one = rank + 1
  tdisp = 1
  do r = 0, nprocs - 1
    call MPI_Accumulate(one, 1, MPI_INTEGER, r, tdisp, 1, MPI_INTEGER, MPI_SUM, win, ierr)
  end do
  call MPI_Win_fence(0, win, ierr)
  call expect(buf(1), 100 + left, 'put by the left neighbour')
  call expect(buf(2), nprocs * (nprocs + 1) / 2, 'sum of every rank')

  ! A shared lock: read back what we put on the right.
  tdisp = 0
  got = -1
  call MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win, ierr)
  call MPI_Get(got, 1, MPI_INTEGER, right, tdisp, 1, MPI_INTEGER, win, ierr)
  call MPI_Win_unlock(right, win, ierr)
  call expect(got, 100 + rank, 'get from the right neighbour')

  ! lock_all: every rank adds 1 at rank 0 and fetches what was there.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  tdisp = 3
  one = 1
  call MPI_Win_lock_all(0, win, ierr)
  call MPI_Fetch_and_op(one, old, MPI_INTEGER, 0, tdisp, MPI_SUM, win, ierr)
  call MPI_Win_flush(0, win, ierr)
  call MPI_Win_unlock_all(win, ierr)
  if (old < 0 .or. old >= nprocs) call fail('fetch_and_op fetched a value out of range')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    call MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win, ierr)
    call expect(buf(4), nprocs, 'fetch_and_op count at rank 0')
    call MPI_Win_unlock(0, win, ierr)
  end if

  ! Requests, in one lock_all epoch: an MPI_RPUT of two integers to the right waited for
  ! with MPI_WAIT, two MPI_RGETs of them back with MPI_WAITALL, an MPI_RGET_ACCUMULATE
  ! (sum) on the first polled with MPI_TEST. Fortran's completion calls reach the MPI's
  ! PMPI_ names (and, under Open MPI, its handle conversions) before librma-mpi's.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Win_lock_all(0, win, ierr)
  vals = [300 + rank, 400 + rank]
  tdisp = 0
  call MPI_Rput(vals, 2, MPI_INTEGER, right, tdisp, 2, MPI_INTEGER, win, req, ierr)
  call expect(ierr, MPI_SUCCESS, 'rput ierr')
  call our_request(HANDLE(req), 'rput')
  call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  call expect(ierr, MPI_SUCCESS, 'wait ierr')
  call expect_true(req == MPI_REQUEST_NULL, 'wait left the request null')
  call MPI_Win_flush(right, win, ierr)
  gots = -1
  tdisp = 0
  call MPI_Rget(gots(1), 1, MPI_INTEGER, right, tdisp, 1, MPI_INTEGER, win, reqs(1), ierr)
  tdisp = 1
  call MPI_Rget(gots(2), 1, MPI_INTEGER, right, tdisp, 1, MPI_INTEGER, win, reqs(2), ierr)
  call our_request(HANDLE(reqs(2)), 'rget')
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  call expect(ierr, MPI_SUCCESS, 'waitall ierr')
  call expect_true(reqs(1) == MPI_REQUEST_NULL .and. reqs(2) == MPI_REQUEST_NULL, &
    'waitall left the requests null')
  call expect(gots(1), 300 + rank, 'rget of the first integer put')
  call expect(gots(2), 400 + rank, 'rget of the second integer put')
  one = 5
  old = -1
  tdisp = 0
  call MPI_Rget_accumulate(one, 1, MPI_INTEGER, old, 1, MPI_INTEGER, right, tdisp, 1, &
    MPI_INTEGER, MPI_SUM, win, req, ierr)
  call our_request(HANDLE(req), 'rget_accumulate')
  done = .false.
  do while (.not. done)
    call MPI_Test(req, done, MPI_STATUS_IGNORE, ierr)
    call expect(ierr, MPI_SUCCESS, 'test ierr')
    if (ierr /= MPI_SUCCESS) exit
  end do
  call expect(old, 300 + rank, 'rget_accumulate fetched the value put')
  call MPI_Win_unlock_all(win, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win, ierr)
  call expect(buf(1), 305 + left, 'put then summed by the left neighbour')
  call expect(buf(2), 400 + left, 'second integer put by the left neighbour')
  call MPI_Win_unlock(rank, win, ierr)

  call MPI_Win_free(win, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_free ierr')

  ! ---- MPI_WIN_CREATE over the program's own array ----
  local = -1
  wsize = 16
  call MPI_Win_create(local, wsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, win2, ierr)
  call ours(HANDLE(win2), 'win_create')
  call MPI_Win_fence(0, win2, ierr)
  call MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win2, ierr)
  val = 200 + rank
  tdisp = 2
  call MPI_Put(val, 1, MPI_INTEGER, right, tdisp, 1, MPI_INTEGER, win2, ierr)
  call MPI_Win_unlock(right, win2, ierr)
  call MPI_Win_fence(0, win2, ierr)
  call expect(local(3), 200 + left, 'put into the application''s memory')
  call MPI_Win_free(win2, ierr)

  ! ---- MPI_WIN_CREATE_KEYVAL: an attribute's delete function, called by librma-mpi in
  ! Fortran's convention (every argument by reference) when the value is replaced,
  ! deleted, and when the window is freed (after the keyval was freed) ----
  extra = 7
  call MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, count_delete, keyval, extra, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_create_keyval ierr')
  call MPI_Win_allocate(wsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, base, win3, ierr)
  call ours(HANDLE(win3), 'win_allocate (keyvals)')
  win3_handle = HANDLE(win3)
  aval = 100 + rank
  call MPI_Win_set_attr(win3, keyval, aval, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_set_attr ierr')
  attr = -1
  call MPI_Win_get_attr(win3, keyval, attr, flag, ierr)
  call expect_true(flag, 'win_get_attr of a set keyval: flag')
  call expect(int(attr), 100 + rank, 'win_get_attr of a set keyval')
  call expect(deletes, 0, 'delete calls before any replacement')
  aval = 200
  call MPI_Win_set_attr(win3, keyval, aval, ierr)
  call expect(deletes, 1, 'delete calls after a replacement')
  call expect(int(deleted_sum), 100 + rank, 'value given to delete on replacement')
  call expect(int(last_extra), 7, 'extra state given to delete')
  call expect(last_win, win3_handle, 'window given to delete')
  call expect(last_keyval, keyval, 'keyval given to delete')
  call MPI_Win_delete_attr(win3, keyval, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_delete_attr ierr')
  call expect(deletes, 2, 'delete calls after win_delete_attr')
  call expect(int(deleted_sum), 300 + rank, 'values given to delete after win_delete_attr')
  call MPI_Win_get_attr(win3, keyval, attr, flag, ierr)
  call expect_true(.not. flag, 'win_get_attr of a deleted attribute: flag')
  aval = 300
  call MPI_Win_set_attr(win3, keyval, aval, ierr)
  call MPI_Win_free_keyval(keyval, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_free_keyval ierr')
  call expect(keyval, MPI_KEYVAL_INVALID, 'keyval after win_free_keyval')
  call MPI_Win_free(win3, ierr)
  call expect(ierr, MPI_SUCCESS, 'win_free with an attribute set ierr')
  call expect(deletes, 3, 'delete calls after win_free')
  call expect(int(deleted_sum), 600 + rank, 'values given to delete after win_free')

  call MPI_Reduce(errors, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total == 0) then
      print '(a)', ' No Errors'
    else
      print '(a,i0,a)', ' Found ', total, ' errors'
    end if
  end if
  call MPI_Finalize(ierr)

contains

  subroutine fail(what)
    character(len=*), intent(in) :: what
    errors = errors + 1
    write (0, '(a,i0,a,a)') '[', rank, '] ', what
  end subroutine

  subroutine expect(got_value, want, what)
    integer, intent(in) :: got_value, want
    character(len=*), intent(in) :: what
    if (got_value /= want) then
      errors = errors + 1
      write (0, '(a,i0,a,a,a,i0,a,i0)') '[', rank, '] ', what, ': ', got_value, ' not ', want
    end if
  end subroutine

  subroutine expect_true(value, what)
    logical, intent(in) :: value
    character(len=*), intent(in) :: what
    if (.not. value) call fail(what)
  end subroutine

  ! The window is librma-mpi's: its Fortran handle in librma-mpi's range.
  subroutine ours(h, what)
    integer, intent(in) :: h
    character(len=*), intent(in) :: what
    if (check_rma .and. (h < 318767104 .or. h >= 318767104 + 65536)) then
      write (0, '(a,i0,a,a,a,i0)') '[', rank, '] ', what, ' made a window not librma-mpi''s: ', h
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
    end if
  end subroutine

  ! The request is librma-mpi's: its Fortran handle in librma-mpi's range under MPICH
  ! (0x400000 + index) or under Open MPI (0x14000000 + index).
  subroutine our_request(h, what)
    integer, intent(in) :: h
    character(len=*), intent(in) :: what
    if (check_rma .and. .not. ((h >= 4194304 .and. h < 8388608) .or. &
        (h >= 335544320 .and. h < 339738624))) then
      write (0, '(a,i0,a,a,a,i0)') '[', rank, '] ', what, ' made a request not librma-mpi''s: ', h
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
    end if
  end subroutine
end program
