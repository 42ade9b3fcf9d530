// Runs many `ozone admin` commands in one JVM, one after another, as Ozone's own launcher runs one: each a new
// org.apache.hadoop.ozone.admin.OzoneAdmin whose execute(args) gives the exit code, its stdout and stderr caught
// apart. A JVM start costs seconds of CPU on a shared 2-core machine, so a list of 52 commands run this way takes
// a fraction of 52 JVMs (tests/ozone_interop/ozone_procs.py, OzoneCluster.admin_batch).
//
// Usage: java -cp <conf>:<this class>:<Ozone's class path> AdminBatch COMMANDS OUT_DIR
// COMMANDS holds one command a line, its arguments separated by tab characters. For command i (from 0) the batch
// writes OUT_DIR/i.out and OUT_DIR/i.err, then OUT_DIR/i.rc last (the exit code: 0 success; a command that calls
// System.exit is stopped there and its status kept). OUT_DIR/done is written after the last command.

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;

public final class AdminBatch {
  /** Thrown in place of System.exit inside a command, so the batch goes on with the next one. */
  static final class ExitCalled extends SecurityException {
    final int status;

    ExitCalled(int status) {
      super("System.exit(" + status + ")");
      this.status = status;
    }
  }

  @SuppressWarnings("removal")
  public static void main(String[] argv) throws IOException {
    if (argv.length != 2) {
      System.err.println("usage: AdminBatch COMMANDS OUT_DIR");
      System.exit(2);
    }
    List<String> lines = Files.readAllLines(Paths.get(argv[0]), StandardCharsets.UTF_8);
    Path out = Paths.get(argv[1]);
    Files.createDirectories(out);
    System.setSecurityManager(new SecurityManager() {
      @Override
      public void checkExit(int status) {
        throw new ExitCalled(status);
      }

      @Override
      public void checkPermission(java.security.Permission perm) {
        // everything else is allowed, as without a security manager
      }
    });
    PrintStream realOut = System.out;
    PrintStream realErr = System.err;
    for (int i = 0; i < lines.size(); i++) {
      String line = lines.get(i);
      String[] args = line.isEmpty() ? new String[0] : line.split("\t", -1);
      ByteArrayOutputStream stdout = new ByteArrayOutputStream();
      ByteArrayOutputStream stderr = new ByteArrayOutputStream();
      int rc;
      System.setOut(new PrintStream(stdout, true, StandardCharsets.UTF_8));
      System.setErr(new PrintStream(stderr, true, StandardCharsets.UTF_8));
      try {
        rc = new org.apache.hadoop.ozone.admin.OzoneAdmin().execute(args);
      } catch (ExitCalled e) {
        rc = e.status;
      } catch (Throwable t) {
        t.printStackTrace();
        rc = 1;
      } finally {
        System.out.flush();
        System.err.flush();
        System.setOut(realOut);
        System.setErr(realErr);
      }
      Files.write(out.resolve(i + ".out"), stdout.toByteArray());
      Files.write(out.resolve(i + ".err"), stderr.toByteArray());
      Files.write(out.resolve(i + ".rc"), Integer.toString(rc).getBytes(StandardCharsets.UTF_8));
    }
    Files.write(out.resolve("done"), new byte[0]);
    System.setSecurityManager(null);
    System.exit(0);
  }
}
