// Preloaded into kinesis-mock by the reader tests (node --require): every
// SIGUSR2 moves this process's clock CLOCK_SHIFT_SECONDS (default 301) ahead,
// so iterators issued before it are past kinesis-mock's 300 s expiry.
const step = 1000 * Number(process.env.CLOCK_SHIFT_SECONDS || "301");
let offset = 0;
const perfNow = performance.now.bind(performance);
const dateNow = Date.now;
performance.now = () => perfNow() + offset;
Date.now = () => dateNow() + offset;
process.on("SIGUSR2", () => {
  offset += step;
  // The test waits for this line in the server's log: the clock has moved.
  console.error(`clockshift: clock moved to +${offset / 1000} s`);
});
