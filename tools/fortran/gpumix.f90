! GPUMix for Fortran: the whole C API (gpumix.h, gpumix_mpi.h) as module procedures over
! iso_c_binding interfaces, in the style of FTorch: derived types for the config, session,
! metrics and model shape; Fortran strings; assumed-shape arrays. Every function returns 0
! (GPUMIX_OK) on success and -1 (GPUMIX_ERROR) on failure, with gpumix_last_error() saying
! what went wrong and how to fix it.
!
! Arrays are the C API's row-major arrays read in Fortran order, so dimensions come
! reversed: a batch of token ids is tokens(seq, batch), its logits logits(vocab, seq, batch),
! per-token losses losses(seq, batch). Token ids are 0-based, as in C.
!
!   use gpumix
!   type(gpumix_config) :: config
!   type(gpumix_session) :: session
!   call gpumix_config_default(config)
!   config%vocab = 256
!   if (gpumix_session_create(session, config) /= GPUMIX_OK) stop gpumix_last_error()
!   if (gpumix_train(session, tokens, 10) /= GPUMIX_OK) ...
!
! Build: gfortran app.f90 $(pkg-config --cflags --libs gpumix-fortran)
module gpumix
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer, parameter, public :: GPUMIX_OK = 0, GPUMIX_ERROR = -1
  ! gpumix_train stopped early by SIGTERM / SIGINT, its steps checkpointed (gpumix.h)
  integer, parameter, public :: GPUMIX_STOPPED = -2
  integer(c_int32_t), parameter, public :: GPUMIX_LOG_QUIET = 0, GPUMIX_LOG_ERROR = 1, GPUMIX_LOG_WARN = 2, &
                                           GPUMIX_LOG_INFO = 3, GPUMIX_LOG_DEBUG = 4

  ! What the C API calls gpumix_config; strings left unallocated are NULL there.
  type, public :: gpumix_config
    character(len=:), allocatable :: model    ! preset: "gpt-nano", "gpt-mini", ...
    integer(c_int32_t) :: vocab = 0           ! vocabulary of the caller's tokens (0: the preset's)
    integer(c_int32_t) :: seq = 0             ! sequence length (0: the preset's context)
    integer(c_int64_t) :: global_batch = 0    ! sequences per step, over all ranks
    integer(c_int32_t) :: total_steps = 0     ! length of the learning-rate schedule
    real(c_float) :: lr = 0                   ! peak learning rate
    integer(c_int64_t) :: seed = 0            ! (uint64_t in C)
    character(len=:), allocatable :: devices  ! one device per rank; unallocated: the CPU
    character(len=:), allocatable :: plan     ! auto, even, proportional, cephalo or a plan file
    character(len=:), allocatable :: out_dir  ! run folder; unallocated: none (inference only)
    integer(c_int32_t) :: threads = 0         ! CPU threads (0: all cores)
    character(len=:), allocatable :: dtype    ! bf16 or fp32; unallocated: the default
    ! The library's log (gpumix.h): nothing is printed unless asked.
    integer(c_int32_t) :: log_level = GPUMIX_LOG_QUIET  ! GPUMIX_LOG_QUIET .. GPUMIX_LOG_DEBUG
    type(c_funptr) :: log_callback = c_null_funptr    ! bind(c) subroutine(level, line, user):
                                                      ! integer(c_int), value; type(c_ptr), value x2
    type(c_ptr) :: log_user = c_null_ptr              ! passed back to the callback
    character(len=:), allocatable :: log_file         ! lines appended here; unallocated: none
    integer(c_int32_t) :: log_all_ranks = 0           ! MPI form: 1: every rank's lines, not rank 0's only
  end type

  type, public :: gpumix_session
    type(c_ptr) :: handle = c_null_ptr
  end type

  type, bind(c), public :: gpumix_metrics
    integer(c_int32_t) :: step
    real(c_double) :: loss, val_loss, unigram_loss, tokens_per_s
  end type

  type, bind(c), public :: gpumix_model_info
    integer(c_int32_t) :: vocab, context, layers, heads, channels
    integer(c_int64_t) :: params
  end type

  ! The C struct gpumix_config.
  type, bind(c) :: c_config
    type(c_ptr) :: model
    integer(c_int32_t) :: vocab, seq
    integer(c_int64_t) :: global_batch
    integer(c_int32_t) :: total_steps
    real(c_float) :: lr
    integer(c_int64_t) :: seed
    type(c_ptr) :: devices, plan, out_dir
    integer(c_int32_t) :: threads
    type(c_ptr) :: dtype
    integer(c_int32_t) :: log_level
    type(c_funptr) :: log_callback
    type(c_ptr) :: log_user, log_file
    integer(c_int32_t) :: log_all_ranks
  end type

  ! NUL-terminated copies of a config's strings, alive while C reads them.
  type :: c_strings
    character(kind=c_char), allocatable :: model(:), devices(:), plan(:), out_dir(:), dtype(:), log_file(:)
  end type

  public :: gpumix_config_default, gpumix_session_create, gpumix_session_create_mpi
  public :: gpumix_session_destroy, gpumix_train, gpumix_get_metrics, gpumix_checkpoint
  public :: gpumix_load, gpumix_get_model_info, gpumix_forward, gpumix_evaluate
  public :: gpumix_generate, gpumix_last_error
  public :: gpumix_generate_batch

  ! Logits for tokens(seq, batch) into logits(vocab, seq, batch), or per-token losses for
  ! tokens and targets(seq, batch) (-1: none) into losses(seq, batch).
  interface gpumix_forward
    module procedure forward_logits, forward_losses
  end interface

  interface
    subroutine c_config_default(config) bind(c, name="gpumix_config_default")
      import :: c_config
      type(c_config), intent(out) :: config
    end subroutine
    type(c_ptr) function c_session_create(config) bind(c, name="gpumix_session_create")
      import :: c_ptr, c_config
      type(c_config), intent(in) :: config
    end function
    type(c_ptr) function c_session_create_mpi(config, comm) bind(c, name="gpumix_session_create_mpi_fortran")
      import :: c_ptr, c_config, c_int32_t
      type(c_config), intent(in) :: config
      integer(c_int32_t), value :: comm
    end function
    subroutine c_session_destroy(session) bind(c, name="gpumix_session_destroy")
      import :: c_ptr
      type(c_ptr), value :: session
    end subroutine
    integer(c_int) function c_train(session, tokens, n_tokens, steps) bind(c, name="gpumix_train")
      import :: c_ptr, c_int, c_int64_t, c_int32_t
      type(c_ptr), value :: session, tokens
      integer(c_int64_t), value :: n_tokens
      integer(c_int32_t), value :: steps
    end function
    integer(c_int) function c_get_metrics(session, metrics) bind(c, name="gpumix_get_metrics")
      import :: c_ptr, c_int, gpumix_metrics
      type(c_ptr), value :: session
      type(gpumix_metrics), intent(out) :: metrics
    end function
    type(c_ptr) function c_checkpoint(session) bind(c, name="gpumix_checkpoint")
      import :: c_ptr
      type(c_ptr), value :: session
    end function
    integer(c_int) function c_load(session, dir) bind(c, name="gpumix_load")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: session
      character(kind=c_char), intent(in) :: dir(*)
    end function
    integer(c_int) function c_get_model_info(session, info) bind(c, name="gpumix_get_model_info")
      import :: c_ptr, c_int, gpumix_model_info
      type(c_ptr), value :: session
      type(gpumix_model_info), intent(out) :: info
    end function
    integer(c_int) function c_forward(session, tokens, targets, batch, seq, out) bind(c, name="gpumix_forward")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: session, tokens, targets, out
      integer(c_int64_t), value :: batch, seq
    end function
    integer(c_int) function c_evaluate(session, tokens, n_tokens, mean_loss) bind(c, name="gpumix_evaluate")
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: session, tokens
      integer(c_int64_t), value :: n_tokens
      real(c_double), intent(out) :: mean_loss
    end function
    integer(c_int) function c_generate(session, prompt, n_prompt, n_new, temperature, top_k, seed, out) &
        bind(c, name="gpumix_generate")
      import :: c_ptr, c_int, c_int64_t, c_int32_t, c_float
      type(c_ptr), value :: session, prompt, out
      integer(c_int64_t), value :: n_prompt, seed
      integer(c_int32_t), value :: n_new, top_k
      real(c_float), value :: temperature
    end function
    integer(c_int) function c_generate_batch(session, prompts, offsets, lengths, n_seqs, n_new, temperature, &
        top_k, top_p, seed, stop, n_stop, out, out_lengths) bind(c, name="gpumix_generate_batch")
      import :: c_ptr, c_int, c_int64_t, c_int32_t, c_float
      type(c_ptr), value :: session, prompts, offsets, lengths, stop, out, out_lengths
      integer(c_int64_t), value :: n_seqs, seed, n_stop
      integer(c_int32_t), value :: n_new, top_k
      real(c_float), value :: temperature, top_p
    end function
    type(c_ptr) function c_last_error() bind(c, name="gpumix_last_error")
      import :: c_ptr
    end function
    subroutine c_set_last_error(message) bind(c, name="gpumix_set_last_error")
      import :: c_char
      character(kind=c_char), intent(in) :: message(*)
    end subroutine
    integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
    end function
  end interface

contains

  ! ---- strings ----------------------------------------------------------------------------

  pure function c_chars(s) result(chars)
    character(len=*), intent(in) :: s
    character(kind=c_char) :: chars(len(s) + 1)
    integer :: i
    do i = 1, len(s)
      chars(i) = s(i:i)
    end do
    chars(len(s) + 1) = c_null_char
  end function

  function f_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  function itoa(i) result(s)
    integer(c_int64_t), intent(in) :: i
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write(buf, '(i0)') i
    s = trim(buf)
  end function

  ! A failure found here (an array's shape): the thread's last error, as the C API's are.
  integer function fail(message) result(rc)
    character(len=*), intent(in) :: message
    call c_set_last_error(c_chars(message))
    rc = GPUMIX_ERROR
  end function

  ! The address of an array's first element, or NULL for an empty one.
  type(c_ptr) function address_i32(a, n) result(p)
    integer(c_int32_t), intent(in), target :: a(*)
    integer(c_int64_t), intent(in) :: n
    p = c_null_ptr
    if (n > 0) p = c_loc(a(1))
  end function

  ! ---- config and session -----------------------------------------------------------------

  ! The C API's defaults (gpumix_config_default).
  subroutine gpumix_config_default(config)
    type(gpumix_config), intent(out) :: config
    type(c_config) :: c
    call c_config_default(c)
    if (c_associated(c%model)) config%model = f_string(c%model)
    if (c_associated(c%devices)) config%devices = f_string(c%devices)
    if (c_associated(c%plan)) config%plan = f_string(c%plan)
    if (c_associated(c%out_dir)) config%out_dir = f_string(c%out_dir)
    if (c_associated(c%dtype)) config%dtype = f_string(c%dtype)
    if (c_associated(c%log_file)) config%log_file = f_string(c%log_file)
    config%log_level = c%log_level
    config%log_callback = c%log_callback
    config%log_user = c%log_user
    config%log_all_ranks = c%log_all_ranks
    config%vocab = c%vocab
    config%seq = c%seq
    config%global_batch = c%global_batch
    config%total_steps = c%total_steps
    config%lr = c%lr
    config%seed = c%seed
    config%threads = c%threads
  end subroutine

  ! A NUL-terminated copy of s in chars and its address in p; NULL when s is unallocated.
  subroutine to_c_string(s, chars, p)
    character(len=:), allocatable, intent(in) :: s
    character(kind=c_char), allocatable, target, intent(inout) :: chars(:)
    type(c_ptr), intent(out) :: p
    p = c_null_ptr
    if (.not. allocated(s)) return
    chars = c_chars(s)
    p = c_loc(chars)
  end subroutine

  ! The C struct of a config, pointing into `strings` (which must outlive its use).
  subroutine to_c(config, strings, c)
    type(gpumix_config), intent(in) :: config
    type(c_strings), intent(inout), target :: strings
    type(c_config), intent(out) :: c
    call to_c_string(config%model, strings%model, c%model)
    call to_c_string(config%devices, strings%devices, c%devices)
    call to_c_string(config%plan, strings%plan, c%plan)
    call to_c_string(config%out_dir, strings%out_dir, c%out_dir)
    call to_c_string(config%dtype, strings%dtype, c%dtype)
    call to_c_string(config%log_file, strings%log_file, c%log_file)
    c%log_level = config%log_level
    c%log_callback = config%log_callback
    c%log_user = config%log_user
    c%log_all_ranks = config%log_all_ranks
    c%vocab = config%vocab
    c%seq = config%seq
    c%global_batch = config%global_batch
    c%total_steps = config%total_steps
    c%lr = config%lr
    c%seed = config%seed
    c%threads = config%threads
  end subroutine

  ! Checks the config and the devices and locks out_dir (the run folder).
  integer function gpumix_session_create(session, config) result(rc)
    type(gpumix_session), intent(out) :: session
    type(gpumix_config), intent(in) :: config
    type(c_strings), target :: strings
    type(c_config) :: c
    call to_c(config, strings, c)
    session%handle = c_session_create(c)
    rc = merge(GPUMIX_OK, GPUMIX_ERROR, c_associated(session%handle))
  end function

  ! The MPI form: the ranks of `comm` (a Fortran handle: MPI_COMM_WORLD or a communicator
  ! of `use mpi`, or comm%MPI_VAL of `use mpi_f08`) train one model together. Collective
  ! over comm, as are gpumix_train, gpumix_load and gpumix_session_destroy (gpumix_mpi.h).
  integer function gpumix_session_create_mpi(session, config, comm) result(rc)
    type(gpumix_session), intent(out) :: session
    type(gpumix_config), intent(in) :: config
    integer, intent(in) :: comm
    type(c_strings), target :: strings
    type(c_config) :: c
    call to_c(config, strings, c)
    session%handle = c_session_create_mpi(c, int(comm, c_int32_t))
    rc = merge(GPUMIX_OK, GPUMIX_ERROR, c_associated(session%handle))
  end function

  ! Releases the session and its run folder's lock.
  subroutine gpumix_session_destroy(session)
    type(gpumix_session), intent(inout) :: session
    call c_session_destroy(session%handle)
    session%handle = c_null_ptr
  end subroutine

  ! ---- training ---------------------------------------------------------------------------

  ! Trains `steps` more steps on tokens(:) (ids below the vocabulary; the last 5% serve as
  ! validation). In the MPI form rank 0's tokens are used; the others may pass an empty array.
  integer function gpumix_train(session, tokens, steps) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: tokens(:)
    integer, intent(in) :: steps
    integer(c_int64_t) :: n
    n = size(tokens, kind=c_int64_t)
    rc = c_train(session%handle, address_i32(tokens, n), n, int(steps, c_int32_t))
  end function

  integer function gpumix_get_metrics(session, metrics) result(rc)
    type(gpumix_session), intent(in) :: session
    type(gpumix_metrics), intent(out) :: metrics
    rc = c_get_metrics(session%handle, metrics)
  end function

  ! The newest checkpoint folder ('' before the first gpumix_train or gpumix_load).
  function gpumix_checkpoint(session) result(dir)
    type(gpumix_session), intent(in) :: session
    character(len=:), allocatable :: dir
    dir = f_string(c_checkpoint(session%handle))
  end function

  ! Continue from a checkpoint folder or a run folder's latest checkpoint, and use its model.
  integer function gpumix_load(session, dir) result(rc)
    type(gpumix_session), intent(inout) :: session
    character(len=*), intent(in) :: dir
    rc = c_load(session%handle, c_chars(dir))
  end function

  ! ---- using the model --------------------------------------------------------------------

  integer function gpumix_get_model_info(session, info) result(rc)
    type(gpumix_session), intent(inout) :: session
    type(gpumix_model_info), intent(out) :: info
    rc = c_get_model_info(session%handle, info)
  end function

  integer function forward_logits(session, tokens, logits) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: tokens(:, :)   ! (seq, batch)
    real(c_float), intent(out), contiguous, target :: logits(:, :, :)   ! (vocab, seq, batch)
    type(gpumix_model_info) :: info
    rc = gpumix_get_model_info(session, info)
    if (rc /= GPUMIX_OK) return
    if (size(logits, 1) /= info%vocab .or. size(logits, 2) /= size(tokens, 1) .or. &
        size(logits, 3) /= size(tokens, 2)) then
      rc = fail('gpumix_forward: logits must be (vocab, seq, batch) = (' // itoa(int(info%vocab, c_int64_t)) // &
                ', ' // itoa(size(tokens, 1, c_int64_t)) // ', ' // itoa(size(tokens, 2, c_int64_t)) // &
                '), got (' // itoa(size(logits, 1, c_int64_t)) // ', ' // itoa(size(logits, 2, c_int64_t)) // &
                ', ' // itoa(size(logits, 3, c_int64_t)) // ')')
      return
    end if
    if (size(tokens) == 0) then
      rc = fail('gpumix_forward: tokens(seq, batch) is empty')
      return
    end if
    rc = c_forward(session%handle, c_loc(tokens), c_null_ptr, size(tokens, 2, c_int64_t), &
                   size(tokens, 1, c_int64_t), c_loc(logits))
  end function

  integer function forward_losses(session, tokens, targets, losses) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: tokens(:, :)    ! (seq, batch)
    integer(c_int32_t), intent(in), contiguous, target :: targets(:, :)   ! (seq, batch), -1: none
    real(c_float), intent(out), contiguous, target :: losses(:, :)        ! (seq, batch)
    if (any(shape(targets) /= shape(tokens)) .or. any(shape(losses) /= shape(tokens))) then
      rc = fail('gpumix_forward: tokens, targets and losses must all be (seq, batch) = (' // &
                itoa(size(tokens, 1, c_int64_t)) // ', ' // itoa(size(tokens, 2, c_int64_t)) // &
                '), got targets (' // itoa(size(targets, 1, c_int64_t)) // ', ' // &
                itoa(size(targets, 2, c_int64_t)) // ') and losses (' // itoa(size(losses, 1, c_int64_t)) // &
                ', ' // itoa(size(losses, 2, c_int64_t)) // ')')
      return
    end if
    if (size(tokens) == 0) then
      rc = fail('gpumix_forward: tokens(seq, batch) is empty')
      return
    end if
    rc = c_forward(session%handle, c_loc(tokens), c_loc(targets), size(tokens, 2, c_int64_t), &
                   size(tokens, 1, c_int64_t), c_loc(losses))
  end function

  ! The mean per-token loss (nats) over tokens(:), read as consecutive windows of the
  ! model's context (at least context + 1 ids).
  integer function gpumix_evaluate(session, tokens, mean_loss) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: tokens(:)
    real(c_double), intent(out) :: mean_loss
    integer(c_int64_t) :: n
    n = size(tokens, kind=c_int64_t)
    rc = c_evaluate(session%handle, address_i32(tokens, n), n, mean_loss)
  end function

  ! Continues prompt(:) by size(new_ids) ids: the same ids as `gpumix generate --prompt-ids`
  ! with the same checkpoint, temperature, top_k and seed.
  integer function gpumix_generate(session, prompt, new_ids, temperature, top_k, seed) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: prompt(:)
    integer(c_int32_t), intent(out), contiguous, target :: new_ids(:)
    real(c_float), intent(in) :: temperature
    integer, intent(in) :: top_k
    integer(c_int64_t), intent(in) :: seed
    integer(c_int64_t) :: n_prompt, n_new
    n_prompt = size(prompt, kind=c_int64_t)
    n_new = size(new_ids, kind=c_int64_t)
    if (n_new > huge(0_c_int32_t)) then
      rc = fail('gpumix_generate: at most ' // itoa(int(huge(0_c_int32_t), c_int64_t)) // ' ids at a time, got ' // &
                itoa(n_new))
      return
    end if
    rc = c_generate(session%handle, address_i32(prompt, n_prompt), n_prompt, int(n_new, c_int32_t), temperature, &
                    int(top_k, c_int32_t), seed, address_i32(new_ids, n_new))
  end function

  ! Several prompts at once (gpumix_generate_batch): prompts(:) holds them one after the
  ! other, prompt j being prompts(offsets(j) + 1 : offsets(j) + lengths(j)) (offsets count
  ! from 0, as in C); column j of new_ids(n_new, n_seqs) receives its new ids (-1 after its
  ! end) and new_lengths(j) how many. A sequence ends after sampling an id of stop(:) (kept;
  ! optional). Sequence j draws its own stream: its ids depend neither on the number of
  ! sequences nor on the other prompts; sequence 1 with top_p 1 and no stop ids is
  ! gpumix_generate's.
  integer function gpumix_generate_batch(session, prompts, offsets, lengths, new_ids, new_lengths, temperature, &
                                         top_k, top_p, seed, stop) result(rc)
    type(gpumix_session), intent(inout) :: session
    integer(c_int32_t), intent(in), contiguous, target :: prompts(:)
    integer(c_int64_t), intent(in), contiguous, target :: offsets(:), lengths(:)
    integer(c_int32_t), intent(out), contiguous, target :: new_ids(:, :)
    integer(c_int32_t), intent(out), contiguous, target :: new_lengths(:)
    real(c_float), intent(in) :: temperature, top_p
    integer, intent(in) :: top_k
    integer(c_int64_t), intent(in) :: seed
    integer(c_int32_t), intent(in), contiguous, target, optional :: stop(:)
    integer(c_int64_t) :: n_seqs, n_new, n_stop, j
    type(c_ptr) :: stop_ptr
    n_seqs = size(lengths, kind=c_int64_t)
    n_new = size(new_ids, 1, kind=c_int64_t)
    if (size(offsets, kind=c_int64_t) /= n_seqs .or. size(new_ids, 2, kind=c_int64_t) /= n_seqs .or. &
        size(new_lengths, kind=c_int64_t) /= n_seqs) then
      rc = fail('gpumix_generate_batch: offsets(' // itoa(size(offsets, kind=c_int64_t)) // '), lengths(' // &
                itoa(n_seqs) // '), new_ids(:, ' // itoa(size(new_ids, 2, kind=c_int64_t)) // ') and new_lengths(' // &
                itoa(size(new_lengths, kind=c_int64_t)) // ') must all have one entry per sequence')
      return
    end if
    do j = 1, n_seqs
      if (offsets(j) < 0 .or. lengths(j) < 1 .or. offsets(j) + lengths(j) > size(prompts, kind=c_int64_t)) then
        rc = fail('gpumix_generate_batch: prompt ' // itoa(j) // ' (offset ' // itoa(offsets(j)) // ', length ' // &
                  itoa(lengths(j)) // ') is not inside prompts(1:' // itoa(size(prompts, kind=c_int64_t)) // &
                  '); each needs offset >= 0, length >= 1 and offset + length <= size(prompts)')
        return
      end if
    end do
    if (n_new > huge(0_c_int32_t)) then
      rc = fail('gpumix_generate_batch: at most ' // itoa(int(huge(0_c_int32_t), c_int64_t)) // &
                ' ids per sequence, got ' // itoa(n_new))
      return
    end if
    if (n_seqs == 0) then
      rc = GPUMIX_OK
      return
    end if
    n_stop = 0
    stop_ptr = c_null_ptr
    if (present(stop)) then
      n_stop = size(stop, kind=c_int64_t)
      stop_ptr = address_i32(stop, n_stop)
    end if
    rc = c_generate_batch(session%handle, address_i32(prompts, size(prompts, kind=c_int64_t)), c_loc(offsets(1)), &
                          c_loc(lengths(1)), n_seqs, int(n_new, c_int32_t), temperature, int(top_k, c_int32_t), &
                          top_p, seed, stop_ptr, n_stop, address_i32(new_ids, n_new * n_seqs), &
                          address_i32(new_lengths, n_seqs))
  end function

  ! The last error on this thread ('' when none).
  function gpumix_last_error() result(message)
    character(len=:), allocatable :: message
    message = f_string(c_last_error())
  end function

end module gpumix
