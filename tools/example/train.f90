! A Fortran MPI program training a GPUMix model inside its own job through the gpumix
! module: every rank of MPI_COMM_WORLD trains one model together (gpumix_session_create_mpi),
! on rank 0's tokens (the bytes of a text file, vocabulary 256); then each rank uses the
! model (local calls): the mean loss, a forward pass, sampling; and a session without a run
! folder reads the checkpoint back and samples the same ids.
!
!   mpifort train.f90 $(pkg-config --cflags --libs gpumix-fortran) -o train_f
!   mpirun -np 2 ./train_f TEXT OUT
!
! Prints on rank 0 "step S loss L" after each gpumix_train call, "checkpoint: DIR", and on
! every rank "rank R generated: ID ..." (the 8 bytes of "Licenses", 16 new ids at
! temperature 0.8, top-k 20, seed 7), which tools/example/run_example.sh compares with
! `mpirun gpumix train` and `gpumix generate --prompt-ids`.
program train
  use mpi
  use gpumix
  use, intrinsic :: iso_c_binding, only: c_int32_t, c_int64_t, c_float, c_double
  implicit none

  integer, parameter :: steps = 6, rows = 2, n_new = 16
  integer :: ierr, rank, i, t, v
  character(len=4096) :: text_path, out_path
  integer(c_int32_t), allocatable :: tokens(:), batch(:, :), targets(:, :)
  real(c_float), allocatable :: logits(:, :, :), losses(:, :)
  integer(c_int32_t) :: prompt(8), ids(n_new), again(n_new)
  integer(c_int32_t) :: prompts(11), batch_ids(n_new, 2), other_ids(n_new, 2), batch_lengths(2), first_stop
  integer(c_int64_t) :: offsets(2), lengths(2)
  type(gpumix_config) :: config
  type(gpumix_session) :: session, reader
  type(gpumix_metrics) :: metrics
  type(gpumix_model_info) :: info
  real(c_double) :: mean, loss, sum_losses, z, top
  character(len=:), allocatable :: checkpoint

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  if (command_argument_count() < 2) then
    if (rank == 0) write(*, '(a)') 'usage: train_f TEXT OUT'
    call MPI_Finalize(ierr)
    stop 2
  end if
  call get_command_argument(1, text_path)
  call get_command_argument(2, out_path)
  ! Every rank reads the text for the checks below; only rank 0's tokens train.
  call read_bytes(trim(text_path), tokens)

  call gpumix_config_default(config)
  config%model = 'gpt-nano'
  config%vocab = 256
  config%seq = 64
  config%global_batch = 8
  config%total_steps = steps
  config%lr = 3.0e-3
  config%threads = 1
  config%out_dir = trim(out_path)
  ! The library's log lines (rank 0's) into a file; it prints nothing itself.
  config%log_level = GPUMIX_LOG_INFO
  config%log_file = trim(out_path) // '.log'
  call check(gpumix_session_create_mpi(session, config, MPI_COMM_WORLD), 'gpumix_session_create_mpi')
  do i = 1, 2
    if (rank == 0) then
      call check(gpumix_train(session, tokens, steps / 2), 'gpumix_train')
    else
      call check(gpumix_train(session, tokens(1:0), steps / 2), 'gpumix_train')  ! rank 0's are used
    end if
    call check(gpumix_get_metrics(session, metrics), 'gpumix_get_metrics')
    if (rank == 0) write(*, '(a, i0, a, f0.6)') 'step ', metrics%step, ' loss ', metrics%loss
  end do
  checkpoint = gpumix_checkpoint(session)
  if (rank == 0) write(*, '(a, a)') 'checkpoint: ', checkpoint

  ! The model, on this rank: logits(vocab, seq, batch) and losses(seq, batch) of the first
  ! `rows` windows; each loss is the log-sum-exp of its logits minus the target's (fp32 sums
  ! of V terms: within V * epsilon * (1 + |loss|)), and their mean is gpumix_evaluate's.
  call check(gpumix_get_model_info(session, info), 'gpumix_get_model_info')
  allocate(batch(info%context, rows), targets(info%context, rows))
  allocate(logits(info%vocab, info%context, rows), losses(info%context, rows))
  batch = reshape(tokens(1:rows * info%context), shape(batch))
  targets = reshape(tokens(2:rows * info%context + 1), shape(targets))
  call check(gpumix_forward(session, batch, logits), 'gpumix_forward (logits)')
  call check(gpumix_forward(session, batch, targets, losses), 'gpumix_forward (losses)')
  call check(gpumix_evaluate(session, tokens(1:rows * info%context + 1), mean), 'gpumix_evaluate')
  sum_losses = 0
  do i = 1, rows
    do t = 1, info%context
      top = maxval(logits(:, t, i))
      z = 0
      do v = 1, info%vocab
        z = z + exp(real(logits(v, t, i), c_double) - top)
      end do
      loss = top + log(z) - logits(targets(t, i) + 1, t, i)
      if (abs(loss - losses(t, i)) > info%vocab * epsilon(1.0_c_float) * (1 + abs(loss))) then
        write(*, '(a, 2i6, 2f12.6)') 'forward disagrees with its logits at', t, i, losses(t, i), loss
        call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
      end if
      sum_losses = sum_losses + losses(t, i)
    end do
  end do
  if (abs(sum_losses / (rows * info%context) - mean) > info%vocab * epsilon(1.0_c_float) * (1 + mean)) then
    write(*, '(a, 2f12.6)') 'evaluate disagrees with forward:', mean, sum_losses / (rows * info%context)
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) write(*, '(a, f0.4, a)') 'mean loss ', mean, ' (forward agrees)'

  ! A wrongly shaped array is an error, not a crash.
  if (gpumix_forward(session, batch, logits(:, :, 1:1)) == GPUMIX_OK) call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  if (rank == 0) write(*, '(a, a)') 'expected error: ', gpumix_last_error()

  prompt = [(iachar('Licenses'(i:i)), i = 1, 8)]
  call check(gpumix_generate(session, prompt, ids, 0.8_c_float, 20, 7_c_int64_t), 'gpumix_generate')
  write(*, '(a, i0, a, *(1x, i0))') 'rank ', rank, ' generated:', ids
  call gpumix_session_destroy(session)

  ! A session without a run folder (out_dir unallocated) uses the checkpoint's model.
  call gpumix_config_default(config)
  deallocate(config%out_dir)
  call check(gpumix_session_create(reader, config), 'gpumix_session_create')
  call check(gpumix_load(reader, checkpoint), 'gpumix_load')
  call check(gpumix_generate(reader, prompt, again, 0.8_c_float, 20, 7_c_int64_t), 'gpumix_generate')
  if (any(again /= ids)) then
    write(*, '(a)') 'the loaded checkpoint sampled other ids for the same seed'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  ! Two prompts at once (8 and 3 ids): the first sequence is gpumix_generate's; it does not
  ! change with another second prompt; a stop id ends it there (kept, then -1).
  prompts = [prompt, prompt(1:3)]
  offsets = [0_c_int64_t, 8_c_int64_t]
  lengths = [8_c_int64_t, 3_c_int64_t]
  call check(gpumix_generate_batch(reader, prompts, offsets, lengths, batch_ids, batch_lengths, 0.8_c_float, 20, &
                                   1.0_c_float, 7_c_int64_t), 'gpumix_generate_batch')
  if (any(batch_ids(:, 1) /= ids) .or. any(batch_lengths /= n_new)) then
    write(*, '(a)') 'gpumix_generate_batch: sequence 1 is not gpumix_generate''s'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  offsets(2) = 4
  call check(gpumix_generate_batch(reader, prompts, offsets, lengths, other_ids, batch_lengths, 0.8_c_float, 20, &
                                   1.0_c_float, 7_c_int64_t), 'gpumix_generate_batch')
  if (any(other_ids(:, 1) /= ids)) then
    write(*, '(a)') 'gpumix_generate_batch: sequence 1 changed with the other prompt'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  first_stop = findloc(ids, ids(5), 1)
  call check(gpumix_generate_batch(reader, prompts, offsets, lengths, other_ids, batch_lengths, 0.8_c_float, 20, &
                                   1.0_c_float, 7_c_int64_t, stop=[ids(5)]), 'gpumix_generate_batch')
  if (batch_lengths(1) /= first_stop .or. any(other_ids(1:first_stop, 1) /= ids(1:first_stop)) .or. &
      any(other_ids(first_stop + 1:, 1) /= -1)) then
    write(*, '(a)') 'gpumix_generate_batch: the stop id did not end sequence 1 there'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  ! Shapes that disagree are an error, not a crash.
  if (gpumix_generate_batch(reader, prompts, offsets(1:1), lengths, batch_ids, batch_lengths, 0.8_c_float, 20, &
                            1.0_c_float, 7_c_int64_t) == GPUMIX_OK) call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  if (rank == 0) write(*, '(a, a)') 'expected error: ', gpumix_last_error()
  if (rank == 0) write(*, '(a)') 'generate_batch: as gpumix_generate, independent of the other prompt, stops'
  call gpumix_session_destroy(reader)
  call MPI_Finalize(ierr)

contains

  subroutine check(rc, what)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: what
    if (rc /= GPUMIX_OK) then
      write(*, '(a, a, a)') what, ' failed: ', gpumix_last_error()
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end subroutine

  subroutine read_bytes(path, ids)
    character(len=*), intent(in) :: path
    integer(c_int32_t), allocatable, intent(out) :: ids(:)
    character(len=1), allocatable :: bytes(:)
    integer :: unit, size_bytes, status
    open(newunit=unit, file=path, access='stream', form='unformatted', action='read', iostat=status)
    if (status /= 0) then
      write(*, '(a, a)') 'cannot read ', path
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
    inquire(unit=unit, size=size_bytes)
    allocate(bytes(size_bytes))
    read(unit) bytes
    close(unit)
    ids = [(iachar(bytes(i)), i = 1, size_bytes)]
  end subroutine

end program train
