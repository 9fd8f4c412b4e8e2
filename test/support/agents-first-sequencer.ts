// The order test files start in. Vitest starts the files it has no timings for largest first, and on a clean
// checkout (CI) it has none; the agents' files are small but run real agents on real engines for a minute and
// more, so the quickstart's started at 214 s of a 303 s run and ran alone on one worker for its last 23 s. They
// start first here; the rest keep vitest's order.
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const isAgentsFile = (file: TestSpecification) => file.moduleId.includes('/test/agents/');

export class AgentsFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    return [...sorted.filter(isAgentsFile), ...sorted.filter((f) => !isAgentsFile(f))];
  }
}
